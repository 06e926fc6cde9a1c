// Command cdi-install prints what cdi-operator would install for a CDI object: the objects of
// CDI v1.65.0's own resource factories (pkg/operator/resources/{operator,cluster,namespaced,cert}),
// so the test world gets upstream's CRDs, RBAC, webhook registrations and the flags and
// environment cdi-operator gives cdi-controller and cdi-apiserver, instead of a copy of them.
//
// Usage: cdi-install [-namespace openshift-cnv] [-version v1.65.0] > objects.json. The output is
// a JSON array of objects, each with apiVersion and kind, in the order cdi-operator creates them
// (pkg/operator/controller/cr-manager.go, GetAllResources): first a CDI object named cdi with an
// empty spec and the CDI CRD (which the operator's own install carries), then the static cluster resources
// (CRDs, ClusterRoles, ClusterRoleBindings), the namespaced resources (ServiceAccounts, Roles,
// RoleBindings, Services, Deployments), the dynamic cluster resources (the APIService and the
// webhook configurations for cdi-api, without a caBundle: the operator copies it in from the
// cdi-apiserver-signer-bundle ConfigMap) and the empty certificate Secrets and ConfigMaps the
// operator's cert manager fills.
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/openshift/library-go/pkg/crypto"

	"github.com/go-logr/logr"

	extv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	apiregistrationv1 "k8s.io/kube-aggregator/pkg/apis/apiregistration/v1"

	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"

	cdiv1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"

	"kubevirt.io/containerized-data-importer/pkg/controller"
	"kubevirt.io/containerized-data-importer/pkg/operator/resources/cert"
	"kubevirt.io/containerized-data-importer/pkg/operator/resources/cluster"
	"kubevirt.io/containerized-data-importer/pkg/operator/resources/namespaced"
	"kubevirt.io/containerized-data-importer/pkg/operator/resources/operator"
)

// The factories keep their groups in maps; these are their keys in a fixed order, so the output
// does not change from run to run.
var (
	staticClusterGroups  = []string{"crd-resources", "apiserver-rbac", "controller-rbac", "uploadproxy-rbac", "cronjob-rbac", "aggregate-roles"}
	namespacedGroups     = []string{"apiserver", "controller", "uploadproxy", "cronjob"}
	dynamicClusterGroups = []string{"apiserver-registrations"}
)

func main() {
	namespace := flag.String("namespace", "openshift-cnv", "namespace CDI is installed in")
	version := flag.String("version", "v1.65.0", "CDI version: the operator version and the image tags")
	registry := flag.String("registry", "quay.io/kubevirt", "registry the images are named in")
	verbosity := flag.String("verbosity", "1", "-v of cdi-controller and cdi-apiserver")
	pullPolicy := flag.String("pull-policy", "IfNotPresent", "image pull policy")
	signers := flag.String("signers", "", "instead of printing objects, write the upload server signers (<dir>/<signer>/tls.{crt,key}) as cdi-operator's cert manager makes them")
	flag.Parse()
	if *signers != "" {
		if err := writeSigners(*signers, *namespace); err != nil {
			fmt.Fprintln(os.Stderr, "cdi-install:", err)
			os.Exit(1)
		}
		return
	}
	if err := run(os.Stdout, *namespace, *version, *registry, *verbosity, *pullPolicy); err != nil {
		fmt.Fprintln(os.Stderr, "cdi-install:", err)
		os.Exit(1)
	}
}

// The signers cdi-controller signs upload server and clone client certificates with. cdi-operator's
// cert manager makes them through library-go's certrotation (pkg/operator/controller/certrotation.go,
// ensureSigner), which makes RSA CAs named <namespace>_<secret>@<unix time>
// (crypto.MakeSelfSignedCAConfigForDuration), valid for CDI's default signer lifetime
// (cert.SignerLifetime).
func writeSigners(dir, namespace string) error {
	for _, name := range []string{"cdi-uploadserver-signer", "cdi-uploadserver-client-signer"} {
		signer := fmt.Sprintf("%s_%s@%d", namespace, name, time.Now().Unix())
		config, err := crypto.MakeSelfSignedCAConfigForDuration(signer, cert.SignerLifetime)
		if err != nil {
			return err
		}
		certPEM, keyPEM, err := config.GetPEMBytes()
		if err != nil {
			return err
		}
		out := filepath.Join(dir, name)
		if err := os.MkdirAll(out, 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(out, "tls.crt"), certPEM, 0o644); err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(out, "tls.key"), keyPEM, 0o600); err != nil {
			return err
		}
	}
	return nil
}

func run(out io.Writer, namespace, version, registry, verbosity, pullPolicy string) error {
	scheme := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{
		clientgoscheme.AddToScheme, extv1.AddToScheme, apiregistrationv1.AddToScheme, cdiv1.AddToScheme,
	} {
		if err := add(scheme); err != nil {
			return err
		}
	}
	var objects []any
	add := func(object client.Object) error {
		gvk, err := apiutil.GVKForObject(object, scheme)
		if err != nil {
			return err
		}
		raw, err := json.Marshal(object)
		if err != nil {
			return err
		}
		var fields map[string]any
		if err := json.Unmarshal(raw, &fields); err != nil {
			return err
		}
		fields["apiVersion"], fields["kind"] = gvk.GroupVersion().String(), gvk.Kind
		delete(fields, "status")
		objects = append(objects, fields)
		return nil
	}

	// The environment cdi-operator reads with envconfig (pkg/operator/controller/controller.go)
	// and passes on to the Deployments it creates.
	image := func(name string) string { return registry + "/" + name + ":" + version }
	namespacedArgs := &namespaced.FactoryArgs{
		OperatorVersion:        version,
		ControllerImage:        image("cdi-controller"),
		DeployClusterResources: "true",
		ImporterImage:          image("cdi-importer"),
		ClonerImage:            image("cdi-cloner"),
		OvirtPopulatorImage:    image("cdi-importer"),
		APIServerImage:         image("cdi-apiserver"),
		UploadProxyImage:       image("cdi-uploadproxy"),
		UploadServerImage:      image("cdi-uploadserver"),
		Verbosity:              verbosity,
		PullPolicy:             pullPolicy,
		Namespace:              namespace,
	}
	// Without a client the dynamic resources carry no caBundle (cluster.GetAPIServerCABundle).
	clusterArgs := &cluster.FactoryArgs{Namespace: namespace, Logger: logr.Discard()}

	// The operator marks its CDI object as the authority for CDIConfig's spec once the CDIConfig
	// CRD exists (pkg/operator/controller/callbacks.go, reconcileSetConfigAuthority); cdi-controller
	// then copies CDI's spec.config into the CDIConfig named "config".
	cdi := &cdiv1.CDI{}
	cdi.Name = "cdi"
	cdi.Annotations = map[string]string{controller.AnnConfigAuthority: ""}
	if err := add(cdi); err != nil {
		return err
	}
	if err := add(operator.NewCdiCrd()); err != nil {
		return err
	}
	for _, group := range staticClusterGroups {
		resources, err := cluster.CreateStaticResourceGroup(group, clusterArgs)
		if err != nil {
			return err
		}
		for _, o := range resources {
			if err := add(o); err != nil {
				return err
			}
		}
	}
	for _, group := range namespacedGroups {
		resources, err := namespaced.CreateResourceGroup(group, namespacedArgs)
		if err != nil {
			return err
		}
		for _, o := range resources {
			if err := add(o); err != nil {
				return err
			}
		}
	}
	for _, group := range dynamicClusterGroups {
		resources, err := cluster.CreateDynamicResourceGroup(group, clusterArgs)
		if err != nil {
			return err
		}
		for _, o := range resources {
			if err := add(o); err != nil {
				return err
			}
		}
	}
	for _, def := range cert.CreateCertificateDefinitions(&cert.FactoryArgs{Namespace: namespace}) {
		var resources []client.Object
		if def.SignerSecret != nil {
			resources = append(resources, def.SignerSecret)
		}
		if def.CertBundleConfigmap != nil {
			resources = append(resources, def.CertBundleConfigmap)
		}
		if def.TargetSecret != nil {
			resources = append(resources, def.TargetSecret)
		}
		for _, o := range resources {
			if err := add(o); err != nil {
				return err
			}
		}
	}
	encoder := json.NewEncoder(out)
	encoder.SetIndent("", " ")
	return encoder.Encode(objects)
}
