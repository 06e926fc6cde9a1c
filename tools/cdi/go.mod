// Pins the CDI control plane the test world runs: cdi-controller and cdi-apiserver of
// kubevirt.io/containerized-data-importer v1.65.0. That module replaces its staging module
// (kubevirt.io/containerized-data-importer-api, which its module zip does not contain), k8s.io,
// controller-runtime and openshift with local paths and pins, which a requiring module does not
// inherit; this module repeats them, with the published API module of the same release
// (kubevirt.io/containerized-data-importer-api v1.65.0) for the staging path.
module guestcluster.dev/tools/cdi

go 1.26.0

require (
	github.com/go-logr/logr v1.4.2
	github.com/kelseyhightower/envconfig v1.4.0
	github.com/kubernetes-csi/external-snapshotter/client/v6 v6.0.1
	github.com/openshift/api v0.0.0-20241107155230-d37bb9f7e380
	github.com/openshift/library-go v0.0.0-20240621150525-4bb4238aef81
	go.uber.org/zap v1.26.0
	k8s.io/api v0.31.5
	k8s.io/apiextensions-apiserver v0.31.5
	k8s.io/apimachinery v0.31.5
	k8s.io/client-go v8.0.0+incompatible
	k8s.io/klog/v2 v2.130.1
	k8s.io/kube-aggregator v0.31.5
	kubevirt.io/containerized-data-importer v1.65.0
	kubevirt.io/containerized-data-importer-api v1.65.0
	sigs.k8s.io/controller-runtime v0.19.5
)

require (
	github.com/appscode/jsonpatch v1.0.1 // indirect
	github.com/beorn7/perks v1.0.1 // indirect
	github.com/cespare/xxhash/v2 v2.3.0 // indirect
	github.com/containers/image/v5 v5.32.0 // indirect
	github.com/containers/storage v1.55.0 // indirect
	github.com/coreos/go-semver v0.3.1 // indirect
	github.com/davecgh/go-spew v1.1.2-0.20180830191138-d8f796af33cc // indirect
	github.com/docker/go-units v0.5.0 // indirect
	github.com/emicklei/go-restful/v3 v3.11.0 // indirect
	github.com/evanphx/json-patch/v5 v5.9.0 // indirect
	github.com/fsnotify/fsnotify v1.7.0 // indirect
	github.com/fxamacker/cbor/v2 v2.7.0 // indirect
	github.com/go-jose/go-jose/v3 v3.0.3 // indirect
	github.com/go-logr/zapr v1.3.0 // indirect
	github.com/go-openapi/jsonpointer v0.21.0 // indirect
	github.com/go-openapi/jsonreference v0.21.0 // indirect
	github.com/go-openapi/swag v0.23.0 // indirect
	github.com/gogo/protobuf v1.3.2 // indirect
	github.com/golang/groupcache v0.0.0-20210331224755-41bb18bfe9da // indirect
	github.com/golang/protobuf v1.5.4 // indirect
	github.com/google/gnostic-models v0.6.8 // indirect
	github.com/google/go-cmp v0.6.0 // indirect
	github.com/google/gofuzz v1.2.0 // indirect
	github.com/google/uuid v1.6.0 // indirect
	github.com/imdario/mergo v0.3.16 // indirect
	github.com/josharian/intern v1.0.0 // indirect
	github.com/json-iterator/go v1.1.12 // indirect
	github.com/mailru/easyjson v0.7.7 // indirect
	github.com/modern-go/concurrent v0.0.0-20180306012644-bacd9c7ef1dd // indirect
	github.com/modern-go/reflect2 v1.0.2 // indirect
	github.com/munnerz/goautoneg v0.0.0-20191010083416-a7dc8b61c822 // indirect
	github.com/opencontainers/go-digest v1.0.0 // indirect
	github.com/openshift/custom-resource-status v1.1.2 // indirect
	github.com/operator-framework/operator-lifecycle-manager v0.0.0-20190725173916-b56e63a643cc // indirect
	github.com/pkg/errors v0.9.1 // indirect
	github.com/prometheus/client_golang v1.19.1 // indirect
	github.com/prometheus/client_model v0.6.1 // indirect
	github.com/prometheus/common v0.55.0 // indirect
	github.com/prometheus/procfs v0.15.1 // indirect
	github.com/rhobs/operator-observability-toolkit v0.0.30 // indirect
	github.com/robfig/cron/v3 v3.0.1 // indirect
	github.com/spf13/pflag v1.0.5 // indirect
	github.com/x448/float16 v0.8.4 // indirect
	go.uber.org/multierr v1.11.0 // indirect
	golang.org/x/crypto v0.31.0 // indirect
	golang.org/x/exp v0.0.0-20240613232115-7f521ea00fb8 // indirect
	golang.org/x/net v0.33.0 // indirect
	golang.org/x/oauth2 v0.27.0 // indirect
	golang.org/x/sys v0.28.0 // indirect
	golang.org/x/term v0.27.0 // indirect
	golang.org/x/text v0.21.0 // indirect
	golang.org/x/time v0.5.0 // indirect
	gomodules.xyz/jsonpatch/v2 v2.4.0 // indirect
	google.golang.org/protobuf v1.34.2 // indirect
	gopkg.in/evanphx/json-patch.v4 v4.12.0 // indirect
	gopkg.in/fsnotify.v1 v1.4.7 // indirect
	gopkg.in/inf.v0 v0.9.1 // indirect
	gopkg.in/yaml.v2 v2.4.0 // indirect
	gopkg.in/yaml.v3 v3.0.1 // indirect
	k8s.io/apiserver v0.31.5 // indirect
	k8s.io/component-helpers v0.31.5 // indirect
	k8s.io/kube-openapi v0.0.0-20240228011516-70dd3763d340 // indirect
	k8s.io/utils v0.0.0-20240921022957-49e7df575cb6 // indirect
	kubevirt.io/controller-lifecycle-operator-sdk v0.2.7 // indirect
	kubevirt.io/controller-lifecycle-operator-sdk/api v0.0.0-20220329064328-f3cc58c6ed90 // indirect
	sigs.k8s.io/json v0.0.0-20221116044647-bc3834ca7abd // indirect
	sigs.k8s.io/structured-merge-diff/v4 v4.4.1 // indirect
	sigs.k8s.io/yaml v1.4.0 // indirect
)

tool (
	kubevirt.io/containerized-data-importer/cmd/cdi-apiserver
	kubevirt.io/containerized-data-importer/cmd/cdi-controller
)

replace (
	github.com/chzyer/logex => github.com/chzyer/logex v1.2.1
	github.com/openshift/api => github.com/openshift/api v0.0.0-20250129180039-d15841be6bde
	github.com/openshift/client-go => github.com/openshift/client-go v0.0.0-20241107164952-923091dd2b1a
	github.com/openshift/library-go => github.com/openshift/library-go v0.0.0-20250128093732-a69305d8f397
	github.com/operator-framework/operator-lifecycle-manager => github.com/operator-framework/operator-lifecycle-manager v0.0.0-20190128024246-5eb7ae5bdb7a

	k8s.io/api => k8s.io/api v0.31.5
	k8s.io/apiextensions-apiserver => k8s.io/apiextensions-apiserver v0.31.5
	k8s.io/apimachinery => k8s.io/apimachinery v0.31.5
	k8s.io/apiserver => k8s.io/apiserver v0.31.5
	k8s.io/cli-runtime => k8s.io/cli-runtime v0.31.5
	k8s.io/client-go => k8s.io/client-go v0.31.5
	k8s.io/cloud-provider => k8s.io/cloud-provider v0.31.5
	k8s.io/cluster-bootstrap => k8s.io/cluster-bootstrap v0.31.5
	k8s.io/code-generator => k8s.io/code-generator v0.31.5
	k8s.io/component-base => k8s.io/component-base v0.31.5
	k8s.io/component-helpers => k8s.io/component-helpers v0.31.5
	k8s.io/controller-manager => k8s.io/controller-manager v0.31.5
	k8s.io/cri-api => k8s.io/cri-api v0.31.5
	k8s.io/csi-translation-lib => k8s.io/csi-translation-lib v0.31.5
	k8s.io/endpointslice => k8s.io/endpointslice v0.31.5
	k8s.io/kms => k8s.io/kms v0.31.5
	k8s.io/kube-aggregator => k8s.io/kube-aggregator v0.31.5
	k8s.io/kube-controller-manager => k8s.io/kube-controller-manager v0.31.5
	k8s.io/kube-proxy => k8s.io/kube-proxy v0.31.5
	k8s.io/kube-scheduler => k8s.io/kube-scheduler v0.31.5
	k8s.io/kubectl => k8s.io/kubectl v0.31.5
	k8s.io/kubelet => k8s.io/kubelet v0.31.5
	k8s.io/legacy-cloud-providers => k8s.io/legacy-cloud-providers v0.31.5
	k8s.io/metrics => k8s.io/metrics v0.31.5
	k8s.io/mount-utils => k8s.io/mount-utils v0.31.5
	k8s.io/pod-security-admission => k8s.io/pod-security-admission v0.31.5
	k8s.io/sample-apiserver => k8s.io/sample-apiserver v0.31.5
	k8s.io/sample-cli-plugin => k8s.io/sample-cli-plugin v0.31.5
	k8s.io/sample-controller => k8s.io/sample-controller v0.31.5

	kubevirt.io/containerized-data-importer-api => kubevirt.io/containerized-data-importer-api v1.65.0
	kubevirt.io/controller-lifecycle-operator-sdk/api => kubevirt.io/controller-lifecycle-operator-sdk/api v0.0.0-20220329064328-f3cc58c6ed90
	sigs.k8s.io/controller-runtime => sigs.k8s.io/controller-runtime v0.19.5
)
