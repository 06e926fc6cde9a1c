// Package v1beta1 is the VirtualMachineTemplate type, with the fields KubeVirt's VM export reads.
package v1beta1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"kubevirt.io/virt-template-api/core"
)

// SchemeGroupVersion is the group and version of the type.
var SchemeGroupVersion = schema.GroupVersion{Group: core.GroupName, Version: "v1beta1"}

// ConditionReady is true once a template can be processed.
const ConditionReady = "Ready"

type VirtualMachineTemplate struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   VirtualMachineTemplateSpec   `json:"spec"`
	Status VirtualMachineTemplateStatus `json:"status,omitempty"`
}

type VirtualMachineTemplateSpec struct {
	Parameters     []Parameter           `json:"parameters,omitempty"`
	VirtualMachine *runtime.RawExtension `json:"virtualMachine,omitempty"`
}

type Parameter struct {
	Name  string `json:"name"`
	Value string `json:"value,omitempty"`
}

type VirtualMachineTemplateStatus struct {
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

type VirtualMachineTemplateList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []VirtualMachineTemplate `json:"items"`
}

func (in *VirtualMachineTemplate) DeepCopy() *VirtualMachineTemplate {
	if in == nil {
		return nil
	}
	out := new(VirtualMachineTemplate)
	*out = *in
	in.ObjectMeta.DeepCopyInto(&out.ObjectMeta)
	out.Spec.Parameters = append([]Parameter(nil), in.Spec.Parameters...)
	if in.Spec.VirtualMachine != nil {
		out.Spec.VirtualMachine = in.Spec.VirtualMachine.DeepCopy()
	}
	out.Status.Conditions = nil
	for _, c := range in.Status.Conditions {
		var copied metav1.Condition
		c.DeepCopyInto(&copied)
		out.Status.Conditions = append(out.Status.Conditions, copied)
	}
	return out
}

func (in *VirtualMachineTemplate) DeepCopyObject() runtime.Object { return in.DeepCopy() }

func (in *VirtualMachineTemplateList) DeepCopyObject() runtime.Object {
	if in == nil {
		return nil
	}
	out := &VirtualMachineTemplateList{TypeMeta: in.TypeMeta}
	in.ListMeta.DeepCopyInto(&out.ListMeta)
	for i := range in.Items {
		out.Items = append(out.Items, *in.Items[i].DeepCopy())
	}
	return out
}

// AddToScheme registers the types.
func AddToScheme(scheme *runtime.Scheme) error {
	scheme.AddKnownTypes(SchemeGroupVersion, &VirtualMachineTemplate{}, &VirtualMachineTemplateList{})
	metav1.AddToGroupVersion(scheme, SchemeGroupVersion)
	return nil
}
