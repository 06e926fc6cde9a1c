// Command kubevirt-install prints what virt-operator would install for a KubeVirt object: the
// objects of KubeVirt v1.9.0's own install strategy (install.GenerateCurrentInstallStrategy), so
// the test world gets upstream's CRDs, RBAC, webhook registrations and the flags and environment
// virt-operator gives virt-controller and virt-api, instead of a copy of them.
//
// Usage: kubevirt-install < kubevirt.json > objects.json. The input is the KubeVirt object (its
// namespace and spec decide the config, as in virt-operator); the output is a JSON array of
// objects, each with apiVersion and kind: first the KubeVirt object with the status fields
// virt-operator derives from it (the default architecture), then the strategy's objects in the
// order virt-operator creates them.
package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	extv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	v1 "kubevirt.io/api/core/v1"

	"kubevirt.io/kubevirt/pkg/virt-operator/resource/generate/install"
	"kubevirt.io/kubevirt/pkg/virt-operator/util"
)

func main() {
	if err := run(os.Stdin, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "kubevirt-install:", err)
		os.Exit(1)
	}
}

func run(in io.Reader, out io.Writer) error {
	var kv v1.KubeVirt
	if err := json.NewDecoder(in).Decode(&kv); err != nil {
		return fmt.Errorf("reading the KubeVirt object: %w", err)
	}
	config := util.GetTargetConfigFromKV(&kv)
	strategy, err := install.GenerateCurrentInstallStrategy(config, "", kv.Namespace)
	if err != nil {
		return err
	}
	util.SetDefaultArchitecture(&kv)
	var objects []any
	add := func(gv schema.GroupVersion, kind string, object any) error {
		raw, err := json.Marshal(object)
		if err != nil {
			return err
		}
		var fields map[string]any
		if err := json.Unmarshal(raw, &fields); err != nil {
			return err
		}
		fields["apiVersion"] = gv.String()
		fields["kind"] = kind
		objects = append(objects, fields)
		return nil
	}
	if err := add(v1.SchemeGroupVersion, "KubeVirt", &kv); err != nil {
		return err
	}
	for _, o := range strategy.CRDs() {
		if err := add(extv1.SchemeGroupVersion, "CustomResourceDefinition", o); err != nil {
			return err
		}
	}
	for _, o := range strategy.ServiceAccounts() {
		if err := add(corev1.SchemeGroupVersion, "ServiceAccount", o); err != nil {
			return err
		}
	}
	for _, o := range strategy.ClusterRoles() {
		if err := add(rbacv1.SchemeGroupVersion, "ClusterRole", o); err != nil {
			return err
		}
	}
	for _, o := range strategy.ClusterRoleBindings() {
		if err := add(rbacv1.SchemeGroupVersion, "ClusterRoleBinding", o); err != nil {
			return err
		}
	}
	for _, o := range strategy.Roles() {
		if err := add(rbacv1.SchemeGroupVersion, "Role", o); err != nil {
			return err
		}
	}
	for _, o := range strategy.RoleBindings() {
		if err := add(rbacv1.SchemeGroupVersion, "RoleBinding", o); err != nil {
			return err
		}
	}
	for _, o := range strategy.Services() {
		if err := add(corev1.SchemeGroupVersion, "Service", o); err != nil {
			return err
		}
	}
	for _, o := range strategy.ConfigMaps() {
		if err := add(corev1.SchemeGroupVersion, "ConfigMap", o); err != nil {
			return err
		}
	}
	for _, o := range strategy.Deployments() {
		if err := add(appsv1.SchemeGroupVersion, "Deployment", o); err != nil {
			return err
		}
	}
	for _, o := range strategy.MutatingWebhookConfigurations() {
		if err := add(admissionregistrationv1.SchemeGroupVersion, "MutatingWebhookConfiguration", o); err != nil {
			return err
		}
	}
	for _, o := range strategy.ValidatingWebhookConfigurations() {
		if err := add(admissionregistrationv1.SchemeGroupVersion, "ValidatingWebhookConfiguration", o); err != nil {
			return err
		}
	}
	for _, o := range strategy.ValidatingAdmissionPolicies() {
		if err := add(admissionregistrationv1.SchemeGroupVersion, "ValidatingAdmissionPolicy", o); err != nil {
			return err
		}
	}
	for _, o := range strategy.ValidatingAdmissionPolicyBindings() {
		if err := add(admissionregistrationv1.SchemeGroupVersion, "ValidatingAdmissionPolicyBinding", o); err != nil {
			return err
		}
	}
	encoder := json.NewEncoder(out)
	encoder.SetIndent("", " ")
	return encoder.Encode(objects)
}
