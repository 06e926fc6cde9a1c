// Command cdi-controller is CDI v1.65.0's controller (DataVolumes, the import, clone and upload
// controllers, StorageProfiles, DataSources, DataImportCrons, the volume populators) built from
// upstream's own packages, with its process-wide places as flags. Upstream's cmd/cdi-controller
// serves metrics on :8443, writes /tmp/ready and reads the token keys from /var/run/cdi/token/keys
// with no way to move them, and test binaries run side by side. Every controller is upstream's,
// set up as upstream's main sets them up; only the wiring below is ours.
package main

import (
	"context"
	"crypto/rsa"
	"flag"
	"os"
	"path/filepath"
	"strconv"

	"github.com/kelseyhightower/envconfig"
	snapshotv1 "github.com/kubernetes-csi/external-snapshotter/client/v6/apis/volumesnapshot/v1"
	ocpconfigv1 "github.com/openshift/api/config/v1"
	imagev1 "github.com/openshift/api/image/v1"
	routev1 "github.com/openshift/api/route/v1"
	"go.uber.org/zap/zapcore"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	extv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	apiruntime "k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/client-go/kubernetes"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/manager/signals"
	"sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"guestcluster.dev/tools/cdi/internal/installer"

	cdiv1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"
	forklift "kubevirt.io/containerized-data-importer-api/pkg/apis/forklift/v1beta1"
	cdiclient "kubevirt.io/containerized-data-importer/pkg/client/clientset/versioned"
	"kubevirt.io/containerized-data-importer/pkg/common"
	"kubevirt.io/containerized-data-importer/pkg/controller"
	dvc "kubevirt.io/containerized-data-importer/pkg/controller/datavolume"
	"kubevirt.io/containerized-data-importer/pkg/controller/populators"
	"kubevirt.io/containerized-data-importer/pkg/controller/transfer"
	metrics "kubevirt.io/containerized-data-importer/pkg/monitoring/metrics/cdi-controller"
	"kubevirt.io/containerized-data-importer/pkg/util"
	"kubevirt.io/containerized-data-importer/pkg/util/cert"
	"kubevirt.io/containerized-data-importer/pkg/util/cert/fetcher"
	"kubevirt.io/containerized-data-importer/pkg/util/cert/generator"
	cryptowatch "kubevirt.io/containerized-data-importer/pkg/util/tls-crypto-watch"
)

// Where cdi-operator mounts the upload server's signers; the environment moves them, as upstream
// (UPLOAD_SERVER_KEY_FILE, ...).
type uploadCerts struct {
	UploadServerKeyFile           string `default:"/var/run/certs/cdi-uploadserver-signer/tls.key" split_words:"true"`
	UploadServerCertFile          string `default:"/var/run/certs/cdi-uploadserver-signer/tls.crt" split_words:"true"`
	UploadClientKeyFile           string `default:"/var/run/certs/cdi-uploadserver-client-signer/tls.key" split_words:"true"`
	UploadClientCertFile          string `default:"/var/run/certs/cdi-uploadserver-client-signer/tls.crt" split_words:"true"`
	UploadServerCaBundleConfigMap string `default:"cdi-uploadserver-signer-bundle" split_words:"true"`
	UploadClientCaBundleConfigMap string `default:"cdi-uploadserver-client-signer-bundle" split_words:"true"`
}

func main() {
	metricsAddr := flag.String("metrics-bind-address", ":8443", "where metrics are served (0 turns them off)")
	readyFile := flag.String("ready-file", "/tmp/ready", "file that exists while the controller runs")
	keyDir := flag.String("token-key-dir", controller.TokenKeyDir, "directory of the cdi-api-signing-key pair (id_rsa, id_rsa.pub)")
	apiServer := flag.String("server", "", "API server URL overriding the kubeconfig's")
	klog.InitFlags(nil)
	flag.Parse()
	defer klog.Flush()
	// As upstream: -v is klog's and the controllers' verbosity (1 unless given), and the
	// controller-runtime log level.
	verbose := "1"
	flag.Visit(func(f *flag.Flag) {
		if f.Name == "v" {
			verbose = f.Value.String()
		}
	})
	level, err := strconv.Atoi(verbose)
	fatal("-v", err)
	logf.SetLogger(zap.New(zap.Level(zapcore.Level(-level))))
	log := logf.Log.WithName("controller")

	importer := required("IMPORTER_IMAGE")
	cloner := required("CLONER_IMAGE")
	uploadServer := required("UPLOADSERVER_IMAGE")
	ovirtPopulator := required("OVIRT_POPULATOR_IMAGE")
	uploadProxyService := required("UPLOADPROXY_SERVICE")
	pullPolicy := common.DefaultPullPolicy
	if v := os.Getenv(common.PullPolicy); v != "" {
		pullPolicy = v
	}
	labels := installer.Labels()
	var certs uploadCerts
	fatal("the environment", envconfig.Process("", &certs))
	fatal("metrics", metrics.SetupMetrics())

	namespace := util.GetNamespace()
	cfg, err := clientcmd.BuildConfigFromFlags(*apiServer, kubeconfigFlag())
	fatal("the API server's configuration", err)
	k8s, err := kubernetes.NewForConfig(cfg)
	fatal("a client", err)
	scheme := apiruntime.NewScheme()
	for _, add := range []func(*apiruntime.Scheme) error{
		clientgoscheme.AddToScheme, cdiv1.AddToScheme, extv1.AddToScheme, snapshotv1.AddToScheme,
		forklift.AddToScheme, imagev1.Install, ocpconfigv1.Install, routev1.Install,
	} {
		utilruntime.Must(add(scheme))
	}
	direct, err := client.New(cfg, client.Options{Scheme: scheme})
	fatal("a direct client", err)
	tlsWatcher := cryptowatch.NewManagedTLSWatcher(cdiclient.NewForConfigOrDie(cfg))

	mgr, err := manager.New(cfg, manager.Options{
		LeaderElection:             true,
		LeaderElectionNamespace:    namespace,
		LeaderElectionID:           "cdi-controller-leader-election-helper",
		LeaderElectionResourceLock: "leases",
		Cache:                      cacheOptions(direct, namespace),
		Scheme:                     scheme,
		Metrics:                    server.Options{BindAddress: *metricsAddr},
	})
	fatal("the controller manager", err)

	uploadClientCerts := &generator.FetchCertGenerator{Fetcher: &fetcher.FileCertFetcher{
		KeyFileName: certs.UploadClientKeyFile, CertFileName: certs.UploadClientCertFile}}
	uploadClientBundle := &fetcher.ConfigMapCertBundleFetcher{
		Name: certs.UploadClientCaBundleConfigMap, Client: k8s.CoreV1().ConfigMaps(namespace)}
	uploadServerCerts := &generator.FetchCertGenerator{Fetcher: &fetcher.FileCertFetcher{
		KeyFileName: certs.UploadServerKeyFile, CertFileName: certs.UploadServerCertFile}}
	uploadServerBundle := &fetcher.ConfigMapCertBundleFetcher{
		Name: certs.UploadServerCaBundleConfigMap, Client: k8s.CoreV1().ConfigMaps(namespace)}
	public, private := tokenKeys(*keyDir)

	ctx := signals.SetupSignalHandler()
	setup := func(what string, err error) { fatal("the "+what+" controller", err) }
	_, err = controller.NewConfigController(mgr, log, uploadProxyService, common.ConfigName, labels)
	setup("config", err)
	_, err = controller.NewStorageProfileController(mgr, log, labels)
	setup("storage profile", err)
	setup("shared index", dvc.CreateCommonIndexes(mgr))
	_, err = dvc.NewImportController(ctx, mgr, log, labels)
	setup("DataVolume import", err)
	_, err = dvc.NewUploadController(ctx, mgr, log, labels)
	setup("DataVolume upload", err)
	_, err = dvc.NewPvcCloneController(ctx, mgr, log, cloner, importer, pullPolicy, public, private, labels)
	setup("DataVolume PVC clone", err)
	_, err = dvc.NewSnapshotCloneController(ctx, mgr, log, cloner, importer, pullPolicy, public, private, labels)
	setup("DataVolume snapshot clone", err)
	_, err = dvc.NewPopulatorController(ctx, mgr, log, labels)
	setup("DataVolume external population", err)
	_, err = controller.NewImportController(mgr, log, importer, pullPolicy, verbose, labels)
	setup("import", err)
	_, err = controller.NewCloneController(mgr, log, cloner, pullPolicy, verbose, uploadClientCerts, uploadServerBundle, public, labels)
	setup("clone", err)
	_, err = controller.NewUploadController(mgr, log, uploadServer, pullPolicy, verbose, uploadServerCerts, uploadClientBundle, labels)
	setup("upload", err)
	_, err = transfer.NewObjectTransferController(mgr, log, labels)
	setup("object transfer", err)
	_, err = controller.NewDataImportCronController(mgr, log, importer, pullPolicy, labels)
	setup("DataImportCron", err)
	_, err = controller.NewDataSourceController(mgr, log, labels)
	setup("DataSource", err)
	setup("populator index", populators.CreateCommonPopulatorIndexes(mgr))
	_, err = populators.NewImportPopulator(ctx, mgr, log, labels)
	setup("import populator", err)
	_, err = populators.NewUploadPopulator(ctx, mgr, log, labels)
	setup("upload populator", err)
	_, err = populators.NewClonePopulator(ctx, mgr, log, cloner, pullPolicy, labels, public)
	setup("clone populator", err)
	_, err = populators.NewForkliftPopulator(ctx, mgr, log, importer, ovirtPopulator, labels)
	setup("forklift populator", err)
	tlsWatcher.SetCache(mgr.GetCache())
	fatal("the TLS profile watcher", mgr.Add(tlsWatcher))

	ready, err := os.Create(*readyFile)
	fatal("the ready file", err)
	ready.Close()
	defer os.Remove(*readyFile)
	klog.Info("cdi-controller: controllers set up, starting the manager")
	fatal("running the manager", mgr.Start(ctx))
}

// The kubeconfig flag controller-runtime registers; KUBECONFIG or in-cluster when empty.
func kubeconfigFlag() string {
	if f := flag.Lookup("kubeconfig"); f != nil && f.Value.String() != "" {
		return f.Value.String()
	}
	return os.Getenv("KUBECONFIG")
}

// As upstream: Ingresses, CronJobs, Jobs, ConfigMaps and Secrets are cached from CDI's namespace
// only, and Routes too where the cluster serves them.
func cacheOptions(direct client.Client, namespace string) cache.Options {
	own := fields.Set{"metadata.namespace": namespace}.AsSelector()
	byObject := map[client.Object]cache.ByObject{
		&networkingv1.Ingress{}: {Field: own},
		&batchv1.CronJob{}:      {Field: own},
		&batchv1.Job{}:          {Field: own},
		&corev1.ConfigMap{}:     {Field: own},
		&corev1.Secret{}:        {Field: own},
	}
	version := &ocpconfigv1.ClusterVersion{ObjectMeta: metav1.ObjectMeta{Name: "version"}}
	err := direct.Get(context.TODO(), client.ObjectKeyFromObject(version), version)
	switch {
	case err == nil:
		byObject[&routev1.Route{}] = cache.ByObject{Field: own}
	case !meta.IsNoMatchError(err):
		klog.Fatalf("reading ClusterVersion version: %v", err)
	}
	return cache.Options{ByObject: byObject}
}

func tokenKeys(dir string) (*rsa.PublicKey, *rsa.PrivateKey) {
	publicPEM, err := os.ReadFile(filepath.Join(dir, "id_rsa.pub"))
	fatal("the token public key", err)
	public, err := controller.DecodePublicKey(publicPEM)
	fatal("the token public key", err)
	privatePEM, err := os.ReadFile(filepath.Join(dir, "id_rsa"))
	fatal("the token private key", err)
	parsed, err := cert.ParsePrivateKeyPEM(privatePEM)
	fatal("the token private key", err)
	private, ok := parsed.(*rsa.PrivateKey)
	if !ok {
		klog.Fatal("the token private key is not an RSA key")
	}
	return public, private
}

func required(name string) string {
	v := os.Getenv(name)
	if v == "" {
		klog.Fatalf("environment variable %s is not set", name)
	}
	return v
}

func fatal(what string, err error) {
	if err != nil {
		klog.Fatalf("%s: %v", what, err)
	}
}
