// Package v1beta1 is a hand-written stand-in for the HyperConverged API of the HyperConverged
// Cluster Operator (github.com/kubevirt/hyperconverged-cluster-operator, API shape as of v1.18.1),
// whose Go module the Go module proxy does not serve. Only the shape matters here: the generator
// derives the HyperConverged CRD schema from these types.
//
// The status is modelled field for field, because that is what guestcluster reads (observed
// generation and the Available/Progressing/Degraded conditions) and what tests write. The spec is
// left open (x-kubernetes-preserve-unknown-fields): upstream it is a large tree of operand
// settings with server-side defaults, none of which guestcluster reads or writes.
//
// +groupName=hco.kubevirt.io
// +versionName=v1beta1
package v1beta1

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	cdiv1beta1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"
)

// HyperConverged deploys and configures KubeVirt, CDI and their companions as one unit.
// +kubebuilder:resource:scope=Namespaced,categories={all},shortName={hco,hcos}
// +kubebuilder:subresource:status
type HyperConverged struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// +kubebuilder:pruning:PreserveUnknownFields
	// +optional
	Spec HyperConvergedSpec `json:"spec,omitempty"`
	// +optional
	Status HyperConvergedStatus `json:"status,omitempty"`
}

// HyperConvergedSpec is not modelled; see the package comment.
type HyperConvergedSpec struct{}

// HyperConvergedStatus is the operator's report on the deployment.
type HyperConvergedStatus struct {
	// +listType=atomic
	// +optional
	Conditions []metav1.Condition `json:"conditions,omitempty"`
	// +listType=atomic
	// +optional
	RelatedObjects []corev1.ObjectReference `json:"relatedObjects,omitempty"`
	// +listType=atomic
	// +optional
	Versions []Version `json:"versions,omitempty"`
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// +optional
	DataImportSchedule string `json:"dataImportSchedule,omitempty"`
	// +optional
	DataImportCronTemplates []DataImportCronTemplateStatus `json:"dataImportCronTemplates,omitempty"`
	// +optional
	SystemHealthStatus string `json:"systemHealthStatus,omitempty"`
	// +optional
	InfrastructureHighlyAvailable *bool `json:"infrastructureHighlyAvailable,omitempty"`
	// +optional
	NodeInfo NodeInfoStatus `json:"nodeInfo,omitempty"`
}

// Version is one component's version.
type Version struct {
	Name    string `json:"name,omitempty"`
	Version string `json:"version,omitempty"`
}

// DataImportCronTemplate is a DataImportCron as the operator renders it.
type DataImportCronTemplate struct {
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec *cdiv1beta1.DataImportCronSpec `json:"spec,omitempty"`
}

// DataImportCronTemplateStatus is a rendered DataImportCron with its state.
type DataImportCronTemplateStatus struct {
	DataImportCronTemplate `json:",inline"`

	Status DataImportCronStatus `json:"status,omitempty"`
}

// DataImportCronStatus is the state of one rendered DataImportCron.
type DataImportCronStatus struct {
	Conditions                     []metav1.Condition `json:"conditions,omitempty"`
	CommonTemplate                 bool               `json:"commonTemplate,omitempty"`
	Modified                       bool               `json:"modified,omitempty"`
	OriginalSupportedArchitectures string             `json:"originalSupportedArchitectures,omitempty"`
}

// NodeInfoStatus lists the CPU architectures of the cluster's nodes.
type NodeInfoStatus struct {
	WorkloadsArchitectures    []string `json:"workloadsArchitectures,omitempty"`
	ControlPlaneArchitectures []string `json:"controlPlaneArchitectures,omitempty"`
}
