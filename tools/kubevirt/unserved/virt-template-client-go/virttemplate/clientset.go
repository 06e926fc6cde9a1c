// Package virttemplate is a REST client for the template.kubevirt.io/v1beta1 group.
package virttemplate

import (
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/client-go/rest"

	"kubevirt.io/virt-template-api/core/v1beta1"
)

type Clientset struct {
	templateV1beta1 *TemplateV1beta1Client
}

type TemplateV1beta1Client struct {
	restClient rest.Interface
}

func (c *TemplateV1beta1Client) RESTClient() rest.Interface { return c.restClient }

func (c *Clientset) TemplateV1beta1() *TemplateV1beta1Client { return c.templateV1beta1 }

// NewForConfig makes a client for the group from a copy of config.
func NewForConfig(config *rest.Config) (*Clientset, error) {
	scheme := runtime.NewScheme()
	if err := v1beta1.AddToScheme(scheme); err != nil {
		return nil, err
	}
	c := rest.CopyConfig(config)
	c.GroupVersion = &v1beta1.SchemeGroupVersion
	c.APIPath = "/apis"
	c.NegotiatedSerializer = serializer.NewCodecFactory(scheme).WithoutConversion()
	if c.UserAgent == "" {
		c.UserAgent = rest.DefaultKubernetesUserAgent()
	}
	restClient, err := rest.RESTClientFor(c)
	if err != nil {
		return nil, err
	}
	return &Clientset{templateV1beta1: &TemplateV1beta1Client{restClient: restClient}}, nil
}
