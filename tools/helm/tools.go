//go:build tools

// Package tools records the command this module builds, so go.sum covers it.
package tools

import (
	_ "helm.sh/helm/v4/cmd/helm"
)
