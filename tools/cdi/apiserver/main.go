// Command cdi-apiserver is CDI v1.65.0's API server (its admission webhooks and the upload API)
// built from upstream's own packages, with the listening address as flags. Upstream's
// cmd/cdi-apiserver binds 0.0.0.0:8443 with no way to move it, and test binaries run side by
// side, each with a control plane of its own. Everything it serves is upstream's
// (apiserver.NewCdiAPIServer); only the wiring below is ours.
package main

import (
	"context"
	"flag"
	"os"

	snapshotv1 "github.com/kubernetes-csi/external-snapshotter/client/v6/apis/volumesnapshot/v1"
	snapclient "github.com/kubernetes-csi/external-snapshotter/client/v6/clientset/versioned"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"
	aggregatorclient "k8s.io/kube-aggregator/pkg/client/clientset_generated/clientset"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	crclient "sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/manager/signals"

	"guestcluster.dev/tools/cdi/internal/installer"

	cdiv1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"
	"kubevirt.io/containerized-data-importer/pkg/apiserver"
	cdiclient "kubevirt.io/containerized-data-importer/pkg/client/clientset/versioned"
	dvc "kubevirt.io/containerized-data-importer/pkg/controller/datavolume"
	certwatcher "kubevirt.io/containerized-data-importer/pkg/util/cert/watcher"
	cryptowatch "kubevirt.io/containerized-data-importer/pkg/util/tls-crypto-watch"
)

// Where cdi-operator mounts the serving certificate; CERT_FILE and KEY_FILE move it, as upstream.
const (
	defaultCert = "/var/run/certs/cdi-apiserver-server-cert/tls.crt"
	defaultKey  = "/var/run/certs/cdi-apiserver-server-cert/tls.key"
)

func main() {
	host := flag.String("host", "0.0.0.0", "address to serve on")
	port := flag.Uint("port", 8443, "port to serve on")
	kubeconfig := flag.String("kubeconfig", os.Getenv("KUBECONFIG"), "kubeconfig (in-cluster config when empty)")
	server := flag.String("server", "", "API server URL overriding the kubeconfig's")
	klog.InitFlags(nil)
	flag.Parse()
	defer klog.Flush()

	utilruntime.Must(corev1.AddToScheme(scheme.Scheme))
	utilruntime.Must(cdiv1.AddToScheme(scheme.Scheme))
	utilruntime.Must(snapshotv1.AddToScheme(scheme.Scheme))
	cfg, err := clientcmd.BuildConfigFromFlags(*server, *kubeconfig)
	fatal("the API server's configuration", err)
	client, err := kubernetes.NewForConfig(cfg)
	fatal("a client", err)
	direct, err := crclient.New(cfg, crclient.Options{Scheme: scheme.Scheme})
	fatal("a controller-runtime client", err)
	// The renderers read volumes, classes and profiles through an informer, as upstream's.
	informers, err := cache.New(cfg, cache.Options{
		Scheme: scheme.Scheme,
		ByObject: map[crclient.Object]cache.ByObject{
			&corev1.PersistentVolume{}: {}, &storagev1.StorageClass{}: {}, &cdiv1.StorageProfile{}: {},
		},
	})
	fatal("the informer cache", err)
	fatal("the available-volume index", dvc.CreateAvailablePersistentVolumeIndex(informers))

	ctx := signals.SetupSignalHandler()
	cdi := cdiclient.NewForConfigOrDie(cfg)
	auth, err := apiserver.NewAuthConfigWatcher(ctx, client)
	fatal("the authentication config watcher", err)
	tls, err := cryptowatch.NewCdiConfigTLSWatcher(ctx, cdi)
	fatal("the CDIConfig TLS watcher", err)
	authorizer, err := apiserver.NewAuthorizorFromConfig(cfg, auth)
	fatal("the authorizer", err)
	certs, err := certwatcher.New(env("CERT_FILE", defaultCert), env("KEY_FILE", defaultKey))
	fatal("the certificate watcher", err)
	app, err := apiserver.NewCdiAPIServer(*host, *port, client,
		aggregatorclient.NewForConfigOrDie(cfg), cdi, snapclient.NewForConfigOrDie(cfg),
		&cachedReads{Client: direct, cache: informers}, authorizer, auth, tls, certs, installer.Labels())
	fatal("the CDI API server", err)

	go func() { fatal("the informer cache", informers.Start(ctx)) }()
	if !informers.WaitForCacheSync(ctx) {
		klog.Fatal("the informer cache did not sync")
	}
	go func() {
		if err := certs.Start(ctx.Done()); err != nil {
			klog.Errorf("certificate watcher: %v", err)
		}
	}()
	fatal("serving", app.Start(ctx.Done()))
}

// cachedReads reads volumes, classes and profiles from the informer and the rest directly.
type cachedReads struct {
	crclient.Client
	cache cache.Cache
}

func (c *cachedReads) Get(ctx context.Context, key crclient.ObjectKey, obj crclient.Object, opts ...crclient.GetOption) error {
	switch obj.(type) {
	case *corev1.PersistentVolume, *storagev1.StorageClass, *cdiv1.StorageProfile:
		return c.cache.Get(ctx, key, obj, opts...)
	}
	return c.Client.Get(ctx, key, obj, opts...)
}

func (c *cachedReads) List(ctx context.Context, list crclient.ObjectList, opts ...crclient.ListOption) error {
	switch list.(type) {
	case *corev1.PersistentVolumeList, *storagev1.StorageClassList, *cdiv1.StorageProfileList:
		return c.cache.List(ctx, list, opts...)
	}
	return c.Client.List(ctx, list, opts...)
}

func env(name, fallback string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return fallback
}

func fatal(what string, err error) {
	if err != nil {
		klog.Fatalf("%s: %v", what, err)
	}
}
