{{/* The chart name, or nameOverride. */}}
{{- define "guestcluster.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* The prefix of every object name: fullnameOverride, else <release>-<chart> (just the release
name when it already contains the chart name). */}}
{{- define "guestcluster.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{- define "guestcluster.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Labels of every object. */}}
{{- define "guestcluster.labels" -}}
helm.sh/chart: {{ include "guestcluster.chart" . }}
{{ include "guestcluster.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: guestcluster
{{- end }}

{{/* What the Service and the Deployment select the operator pods by. */}}
{{- define "guestcluster.selectorLabels" -}}
app.kubernetes.io/name: {{ include "guestcluster.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{/* The operator's ServiceAccount. */}}
{{- define "guestcluster.serviceAccountName" -}}
{{- default (include "guestcluster.fullname" .) .Values.serviceAccount.name }}
{{- end }}

{{/* The operator image, repository:tag (tag defaults to appVersion). */}}
{{- define "guestcluster.image" -}}
{{- printf "%s:%s" .Values.image.repository (.Values.image.tag | default .Chart.AppVersion | toString) }}
{{- end }}

{{/* The image of the Jobs the operator creates: jobImage, else the operator's own. */}}
{{- define "guestcluster.jobImage" -}}
{{- .Values.jobImage | default (include "guestcluster.image" .) }}
{{- end }}

{{/* "true" on OpenShift: `platform: openshift`, or `auto` on a cluster that serves SCCs. */}}
{{- define "guestcluster.openshift" -}}
{{- if or (eq .Values.platform "openshift") (and (eq .Values.platform "auto") (.Capabilities.APIVersions.Has "security.openshift.io/v1")) -}}
true
{{- end }}
{{- end }}

{{/* The operator pod's security context: on OpenShift without the IDs its SCC assigns. */}}
{{- define "guestcluster.podSecurityContext" -}}
{{- $context := deepCopy .Values.podSecurityContext }}
{{- if include "guestcluster.openshift" . }}
{{- $_ := unset $context "runAsUser" }}
{{- $_ := unset $context "runAsGroup" }}
{{- $_ := unset $context "fsGroup" }}
{{- end }}
{{- toYaml $context }}
{{- end }}

{{/* The Lease the operator elects its leader on (src/operator/leader.rs, Config::new). */}}
{{- define "guestcluster.leaderLease" -}}
28494864.opdev.io
{{- end }}
