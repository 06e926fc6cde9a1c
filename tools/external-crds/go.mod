// Pins the upstream API types the external CRDs of the test control plane are generated from
// (see main.go), and the CRD parser that reads them:
//   kubevirt.io/api v1.9.0 (the version guestcluster targets);
//   kubevirt.io/containerized-data-importer-api v1.66.0 (the target v1.66.1 is not served by the
//     Go module proxy; v1.66.0 is the nearest that is);
//   github.com/openshift/api at the pseudo-version upstream guestcluster pins;
//   sigs.k8s.io/controller-tools v0.23.0 (built against k8s.io 0.37, the control plane's release).
// One module graph means one k8s.io/api: the core types KubeVirt and CDI embed (affinity,
// tolerations, resource requirements) are v0.37's, not the v0.34 KubeVirt 1.9 was built with.
module guestcluster.dev/tools/external-crds

go 1.26.0

require (
	github.com/openshift/api v0.0.0-20260805160557-b61243060d5f
	golang.org/x/tools v0.51.0
	k8s.io/api v0.37.0
	k8s.io/apiextensions-apiserver v0.37.0
	k8s.io/apimachinery v0.37.0
	kubevirt.io/api v1.9.0
	kubevirt.io/containerized-data-importer-api v1.66.0
	sigs.k8s.io/controller-tools v0.23.0
	sigs.k8s.io/yaml v1.6.0
)

require (
	github.com/fxamacker/cbor/v2 v2.9.1 // indirect
	github.com/go-logr/logr v1.4.3 // indirect
	github.com/gobuffalo/flect v1.0.3 // indirect
	github.com/google/uuid v1.6.0 // indirect
	github.com/json-iterator/go v1.1.12 // indirect
	github.com/modern-go/concurrent v0.0.0-20180306012644-bacd9c7ef1dd // indirect
	github.com/modern-go/reflect2 v1.0.3-0.20250322232337-35a7c28c31ee // indirect
	github.com/openshift/custom-resource-status v1.1.2 // indirect
	github.com/x448/float16 v0.8.4 // indirect
	go.yaml.in/yaml/v2 v2.4.4 // indirect
	golang.org/x/mod v0.41.0 // indirect
	golang.org/x/net v0.59.0 // indirect
	golang.org/x/sync v0.23.0 // indirect
	golang.org/x/text v0.42.0 // indirect
	google.golang.org/genproto/googleapis/api v0.0.0-20260526163538-3dc84a4a5aaa // indirect
	google.golang.org/genproto/googleapis/rpc v0.0.0-20260526163538-3dc84a4a5aaa // indirect
	gopkg.in/inf.v0 v0.9.1 // indirect
	k8s.io/klog/v2 v2.140.0 // indirect
	k8s.io/kube-openapi v0.0.0-20260721132016-d427ff9ee9ad // indirect
	k8s.io/utils v0.0.0-20260626114624-be93311217bd // indirect
	kubevirt.io/controller-lifecycle-operator-sdk/api v0.2.4 // indirect
	sigs.k8s.io/json v0.0.0-20250730193827-2d320260d730 // indirect
	sigs.k8s.io/randfill v1.0.0 // indirect
	sigs.k8s.io/structured-merge-diff/v6 v6.4.2 // indirect
)
