// Package installer reads what cdi-operator passes down to the processes it deploys.
package installer

import (
	"os"

	"kubevirt.io/containerized-data-importer/pkg/common"
)

// Labels are the labels cdi-operator passes down (INSTALLER_PART_OF_LABEL,
// INSTALLER_VERSION_LABEL), which its processes put on what they create.
func Labels() map[string]string {
	labels := map[string]string{}
	if v := os.Getenv(common.InstallerPartOfLabel); v != "" {
		labels[common.AppKubernetesPartOfLabel] = v
	}
	if v := os.Getenv(common.InstallerVersionLabel); v != "" {
		labels[common.AppKubernetesVersionLabel] = v
	}
	return labels
}
