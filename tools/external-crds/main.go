// Command external-crds writes the CustomResourceDefinitions of the external kinds (KubeVirt, CDI,
// OpenShift, HCO) that guestcluster's test control plane installs. The schemas are derived by
// controller-tools' CRD parser from the upstream Go API types pinned in go.mod, the same way the
// upstream projects derive theirs, so the test API server prunes, types and validates the objects
// the operator and the simulation write as a real cluster would.
//
// Usage: external-crds <output directory>. Run from this module's directory (the packages are
// loaded with `go list` from here); generate.sh does both.
package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"runtime/debug"
	"slices"
	"strings"

	"golang.org/x/tools/go/packages"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-tools/pkg/crd"
	"sigs.k8s.io/controller-tools/pkg/genall"
	"sigs.k8s.io/controller-tools/pkg/loader"
	"sigs.k8s.io/yaml"

	// Linked in so that go.mod keeps the pins and the build info names their versions; the
	// generator itself reads them as source through the loader.
	_ "github.com/openshift/api/config/v1"
	_ "github.com/openshift/api/route/v1"
	_ "guestcluster.dev/tools/external-crds/hco/v1beta1"
	_ "kubevirt.io/api/core/v1"
	_ "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"
)

// kind is one CRD to write. Plural and scope must agree with what upstream declares (checked);
// short names, categories and the status subresource are set here only where the upstream type
// carries no markers for them and its operator sets them in code (KubeVirt).
type kind struct {
	pkg    string // Go package of the type
	module string // module that package belongs to (for the header); "" = this module
	name   string // Go type name = Kind
	group  string
	plural string
	scope  apiextensionsv1.ResourceScope
	// names applied over what the markers give; nil = keep the markers' values
	shortNames []string
	categories []string
	// upstream's operator installs the CRD with a status subresource although no marker says so
	statusInCode bool
	// the CRD upstream ships next to the types (relative to the package directory), used instead
	// of running the parser: OpenShift's generator also applies feature-set selection and manual
	// schema overrides that controller-tools does not know
	manifest string
}

var kinds = []kind{
	{pkg: kubevirtPkg, module: "kubevirt.io/api", name: "VirtualMachine", group: "kubevirt.io",
		plural: "virtualmachines", scope: apiextensionsv1.NamespaceScoped,
		shortNames: []string{"vm", "vms"}, categories: []string{"all"}, statusInCode: true},
	{pkg: kubevirtPkg, module: "kubevirt.io/api", name: "VirtualMachineInstance", group: "kubevirt.io",
		plural: "virtualmachineinstances", scope: apiextensionsv1.NamespaceScoped,
		shortNames: []string{"vmi", "vmis"}, categories: []string{"all"}},
	{pkg: kubevirtPkg, module: "kubevirt.io/api", name: "KubeVirt", group: "kubevirt.io",
		plural: "kubevirts", scope: apiextensionsv1.NamespaceScoped,
		shortNames: []string{"kv", "kvs"}, categories: []string{"all"}, statusInCode: true},
	{pkg: cdiPkg, module: cdiModule, name: "DataVolume", group: "cdi.kubevirt.io",
		plural: "datavolumes", scope: apiextensionsv1.NamespaceScoped},
	{pkg: cdiPkg, module: cdiModule, name: "DataSource", group: "cdi.kubevirt.io",
		plural: "datasources", scope: apiextensionsv1.NamespaceScoped},
	{pkg: cdiPkg, module: cdiModule, name: "CDI", group: "cdi.kubevirt.io",
		plural: "cdis", scope: apiextensionsv1.ClusterScoped},
	{pkg: cdiPkg, module: cdiModule, name: "StorageProfile", group: "cdi.kubevirt.io",
		plural: "storageprofiles", scope: apiextensionsv1.ClusterScoped},
	// virt-controller waits for its informer of CDIConfigs whenever the DataVolume API is served.
	{pkg: cdiPkg, module: cdiModule, name: "CDIConfig", group: "cdi.kubevirt.io",
		plural: "cdiconfigs", scope: apiextensionsv1.ClusterScoped},
	{pkg: "github.com/openshift/api/route/v1", module: openshiftModule, name: "Route",
		group: "route.openshift.io", plural: "routes", scope: apiextensionsv1.NamespaceScoped,
		manifest: "zz_generated.crd-manifests/routes.crd.yaml"},
	{pkg: "github.com/openshift/api/config/v1", module: openshiftModule, name: "Ingress",
		group: "config.openshift.io", plural: "ingresses", scope: apiextensionsv1.ClusterScoped,
		manifest: "zz_generated.crd-manifests/0000_10_config-operator_01_ingresses-Default.crd.yaml"},
	{pkg: "guestcluster.dev/tools/external-crds/hco/v1beta1", name: "HyperConverged", group: "hco.kubevirt.io",
		plural: "hyperconvergeds", scope: apiextensionsv1.NamespaceScoped},
}

const (
	kubevirtPkg     = "kubevirt.io/api/core/v1"
	cdiPkg          = "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"
	cdiModule       = "kubevirt.io/containerized-data-importer-api"
	openshiftModule = "github.com/openshift/api"
)

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: external-crds <output directory>")
		os.Exit(2)
	}
	if err := run(os.Args[1]); err != nil {
		fmt.Fprintln(os.Stderr, "external-crds:", err)
		os.Exit(1)
	}
}

func run(outDir string) error {
	versions, err := moduleVersions()
	if err != nil {
		return err
	}
	var roots []string
	for _, k := range kinds {
		if !slices.Contains(roots, k.pkg) {
			roots = append(roots, k.pkg)
		}
	}
	// The runtime gives a loader, a marker collector with every CRD marker registered and a type
	// checker, exactly as `controller-gen crd` sets them up.
	rt, err := genall.Generators{genallGenerator(crd.Generator{})}.ForRoots(roots...)
	if err != nil {
		return fmt.Errorf("loading %v: %w", roots, err)
	}
	// KubeVirt's configuration has float fields; upstream generates its CRDs allowing them too.
	parser := &crd.Parser{Collector: rt.Collector, Checker: rt.Checker, AllowDangerousTypes: true}
	crd.AddKnownTypes(parser)
	for _, root := range rt.Roots {
		parser.NeedPackage(root)
	}
	var files []file
	for _, k := range kinds {
		def, origin, err := definition(parser, rt.Roots, k)
		if err != nil {
			return err
		}
		f, err := render(k, def, origin, versions)
		if err != nil {
			return err
		}
		files = append(files, f)
	}
	// Loader and marker errors (unknown fields, bad markers) surface here; type errors are
	// expected from partial type checking and are skipped, as controller-gen does.
	if loader.PrintErrors(rt.Roots, packages.TypeError) {
		return fmt.Errorf("the packages had errors (printed above)")
	}
	if err := os.MkdirAll(outDir, 0o755); err != nil {
		return err
	}
	for _, f := range files {
		if err := os.WriteFile(filepath.Join(outDir, f.name), f.text, 0o644); err != nil {
			return err
		}
	}
	return nil
}

// genallGenerator adapts a value generator to genall's pointer-to-interface list.
func genallGenerator(g genall.Generator) *genall.Generator { return &g }

type file struct {
	name string
	text []byte
}

// definition derives the CRD of one kind, returning it with a phrase naming how.
func definition(parser *crd.Parser, roots []*loader.Package, k kind) (apiextensionsv1.CustomResourceDefinition, string, error) {
	gk := schema.GroupKind{Group: k.group, Kind: k.name}
	if k.manifest != "" {
		def, err := shippedManifest(roots, k)
		return def, fmt.Sprintf("the CRD upstream generated from it (%s)", k.manifest), err
	}
	noDescriptions := 0
	parser.NeedCRDFor(gk, &noDescriptions)
	def, ok := parser.CustomResourceDefinitions[gk]
	if !ok || len(def.Spec.Versions) != 1 {
		return def, "", fmt.Errorf("%s: expected exactly one version of %s in %s (is the package's +groupName %s?)",
			k.name, gk, k.pkg, k.group)
	}
	return def, "schema by sigs.k8s.io/controller-tools " + controllerToolsVersion, nil
}

// shippedManifest reads the CRD that upstream ships in the package's directory, without
// descriptions and release annotations.
func shippedManifest(roots []*loader.Package, k kind) (apiextensionsv1.CustomResourceDefinition, error) {
	var def apiextensionsv1.CustomResourceDefinition
	var dir string
	for _, root := range roots {
		if root.PkgPath == k.pkg && len(root.GoFiles) > 0 {
			dir = filepath.Dir(root.GoFiles[0])
		}
	}
	if dir == "" {
		return def, fmt.Errorf("%s: package %s was not loaded", k.name, k.pkg)
	}
	path := filepath.Join(dir, k.manifest)
	raw, err := os.ReadFile(path)
	if err != nil {
		return def, fmt.Errorf("%s: %w", k.name, err)
	}
	if err := yaml.UnmarshalStrict(raw, &def); err != nil {
		return def, fmt.Errorf("%s: %s: %w", k.name, path, err)
	}
	if def.Spec.Names.Kind != k.name || def.Spec.Group != k.group || len(def.Spec.Versions) != 1 {
		return def, fmt.Errorf("%s: %s does not define exactly one version of %s.%s", k.name, path, k.name, k.group)
	}
	def.Annotations = nil
	def.Labels = nil
	for _, v := range def.Spec.Versions {
		if v.Schema != nil && v.Schema.OpenAPIV3Schema != nil {
			crd.TruncateDescription(v.Schema.OpenAPIV3Schema, 0)
		}
		for i := range v.AdditionalPrinterColumns {
			v.AdditionalPrinterColumns[i].Description = ""
		}
	}
	return def, nil
}

func render(k kind, def apiextensionsv1.CustomResourceDefinition, origin string, versions map[string]string) (file, error) {
	spec := &def.Spec
	if spec.Names.Plural != k.plural || spec.Scope != k.scope {
		return file{}, fmt.Errorf("%s: upstream declares plural %q and scope %s, the test control plane expects %q and %s",
			k.name, spec.Names.Plural, spec.Scope, k.plural, k.scope)
	}
	if k.shortNames != nil {
		spec.Names.ShortNames = k.shortNames
	}
	if k.categories != nil {
		spec.Names.Categories = k.categories
	}
	version := &spec.Versions[0]
	version.Storage = true
	statusNote := "status subresource as upstream"
	if version.Subresources == nil || version.Subresources.Status == nil {
		if k.statusInCode {
			statusNote = "status subresource as upstream's operator installs it"
		} else {
			// The simulation and the tests write status through /status for every kind.
			statusNote = "status subresource added for the test control plane (upstream's CRD has none)"
		}
		if version.Subresources == nil {
			version.Subresources = &apiextensionsv1.CustomResourceSubresources{}
		}
		version.Subresources.Status = &apiextensionsv1.CustomResourceSubresourceStatus{}
	}
	crd.FixTopLevelMetadata(def)

	source := fmt.Sprintf("Go package %s (module %s %s)", k.pkg, k.module, versions[k.module])
	if k.module == "" {
		source = fmt.Sprintf("Go package %s, a hand-written stand-in documented in that package", k.pkg)
	}
	header := strings.Join([]string{
		"# Generated by tools/external-crds (make external-crds); do not edit.",
		fmt.Sprintf("# %s %s/%s from %s,", k.name, k.group, version.Name, source),
		fmt.Sprintf("# %s; descriptions omitted; %s.", origin, statusNote),
		"---",
	}, "\n")

	body, err := marshal(def)
	if err != nil {
		return file{}, fmt.Errorf("%s: %w", k.name, err)
	}
	return file{name: fmt.Sprintf("%s_%s.yaml", k.group, k.plural), text: append([]byte(header+"\n"), body...)}, nil
}

// marshal renders the CRD as YAML with sorted keys, without the empty status and creation
// timestamp a typed object serialises.
func marshal(def apiextensionsv1.CustomResourceDefinition) ([]byte, error) {
	raw, err := json.Marshal(def)
	if err != nil {
		return nil, err
	}
	var obj map[string]any
	if err := json.Unmarshal(raw, &obj); err != nil {
		return nil, err
	}
	delete(obj, "status")
	if meta, ok := obj["metadata"].(map[string]any); ok {
		delete(meta, "creationTimestamp")
	}
	return yaml.Marshal(obj)
}

// controllerToolsVersion is the version of the CRD parser, from the build info.
var controllerToolsVersion string

// moduleVersions maps each linked module to its version, from the build info.
func moduleVersions() (map[string]string, error) {
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return nil, fmt.Errorf("no build info in the binary")
	}
	versions := map[string]string{}
	for _, dep := range info.Deps {
		v := dep.Version
		if dep.Replace != nil {
			v = dep.Replace.Version
		}
		versions[dep.Path] = v
	}
	for _, k := range kinds {
		if k.module != "" && versions[k.module] == "" {
			return nil, fmt.Errorf("module %s is not in the build info", k.module)
		}
	}
	controllerToolsVersion = versions["sigs.k8s.io/controller-tools"]
	if controllerToolsVersion == "" {
		return nil, fmt.Errorf("module sigs.k8s.io/controller-tools is not in the build info")
	}
	return versions, nil
}
