{{/*
The chart's name label. Fixed: the certificate controller injects its CA only into webhook configurations
labelled app.kubernetes.io/name=dispatch-k8s (certs/injection.py), so no nameOverride may change it.
*/}}
{{- define "dispatch-k8s.name" -}}
dispatch-k8s
{{- end }}

{{/*
Name of every object: fullnameOverride, else the release name if it contains the chart's name, else
<release>-dispatch-k8s; at most 63 characters (it is also the Service's name).
*/}}
{{- define "dispatch-k8s.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else if contains "dispatch-k8s" .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-dispatch-k8s" .Release.Name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}

{{- define "dispatch-k8s.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "dispatch-k8s.tag" -}}
{{- .Values.image.tag | default .Chart.AppVersion }}
{{- end }}

{{/* Every object's labels: the recommended ones and commonLabels. */}}
{{- define "dispatch-k8s.labels" -}}
{{ include "dispatch-k8s.recommendedLabels" . }}
{{- with .Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{/* Helm's recommended labels (helm.sh/docs/chart_best_practices/labels). */}}
{{- define "dispatch-k8s.recommendedLabels" -}}
helm.sh/chart: {{ include "dispatch-k8s.chart" . }}
{{ include "dispatch-k8s.selectorLabels" . }}
app.kubernetes.io/version: {{ include "dispatch-k8s.tag" . | replace "+" "_" | trunc 63 | trimSuffix "-" | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: dispatch
{{- end }}

{{/* The Deployment's selector: name and instance only (a selector cannot change after creation). */}}
{{- define "dispatch-k8s.selectorLabels" -}}
app.kubernetes.io/name: {{ include "dispatch-k8s.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "dispatch-k8s.serviceAccountName" -}}
{{- .Values.serviceAccount.name | default (include "dispatch-k8s.fullname" .) }}
{{- end }}

{{/*
The webhook container's own ServiceAccount: it may only read TrainingRuntimes, is not one of dispatch's
principals and has no right on the certificate Secret (docs/security.md). Its token reaches the webhook
container only, from the Secret below; the pod's ServiceAccount token reaches the agent and the certificate
controller only.
*/}}
{{- define "dispatch-k8s.webhookServiceAccountName" -}}
{{- printf "%s-webhook" (include "dispatch-k8s.fullname" .) }}
{{- end }}

{{- define "dispatch-k8s.webhookTokenSecret" -}}
{{- printf "%s-webhook-token" (include "dispatch-k8s.fullname" .) }}
{{- end }}

{{/* Where a container finds its ServiceAccount token, CA and namespace (the in-cluster client's path). */}}
{{- define "dispatch-k8s.tokenDir" -}}
/var/run/secrets/kubernetes.io/serviceaccount
{{- end }}

{{- define "dispatch-k8s.certsSecret" -}}
{{- printf "%s-certs" (include "dispatch-k8s.fullname" .) }}
{{- end }}

{{/* The Secret the servers' certificate comes from: the builtin controller's, or cert-manager's. */}}
{{- define "dispatch-k8s.tlsSecret" -}}
{{- if eq .Values.certs.mode "cert-manager" }}
{{- printf "%s-tls" (include "dispatch-k8s.fullname" .) }}
{{- else }}
{{- include "dispatch-k8s.certsSecret" . }}
{{- end }}
{{- end }}

{{- define "dispatch-k8s.servingCertificate" -}}
{{- printf "%s-serving" (include "dispatch-k8s.fullname" .) }}
{{- end }}

{{/*
The webhook configurations' annotations: in cert-manager mode, cainjector's cert-manager.io/inject-ca-from
naming the serving Certificate (it injects that Certificate's ca.crt); none in builtin mode, where the
certificate controller injects.
*/}}
{{- define "dispatch-k8s.webhookAnnotations" -}}
{{- if eq .Values.certs.mode "cert-manager" }}
annotations:
  cert-manager.io/inject-ca-from: {{ printf "%s/%s" .Release.Namespace (include "dispatch-k8s.servingCertificate" .) }}
{{- end }}
{{- end }}

{{- define "dispatch-k8s.leaseNamespace" -}}
{{- .Values.agent.lease.namespace | default .Release.Namespace }}
{{- end }}

{{/* repository:tag, and @digest when one is given: the digest is what is pulled. */}}
{{- define "dispatch-k8s.image" -}}
{{- $image := printf "%s:%s" .Values.image.repository (include "dispatch-k8s.tag" .) }}
{{- with .Values.image.digest }}{{ $image = printf "%s@%s" $image . }}{{ end }}
{{- $image }}
{{- end }}

{{/*
dispatch's usernames as a JSON list: the chart's ServiceAccount first, then webhook.dispatch.extraUsernames, then
the pre-delete hook's ServiceAccount (it deletes the prologue's ConfigMaps, which only dispatch and the garbage
collector may; it exists only during `helm uninstall`, and its RBAC is that and the webhook configurations alone).
*/}}
{{- define "dispatch-k8s.dispatchUsernames" -}}
{{- $sa := printf "system:serviceaccount:%s:%s" .Release.Namespace (include "dispatch-k8s.serviceAccountName" .) }}
{{- $names := prepend (without .Values.webhook.dispatch.extraUsernames $sa) $sa }}
{{- if .Values.uninstallHook.enabled }}
{{- $hook := printf "system:serviceaccount:%s:%s-uninstall" .Release.Namespace (include "dispatch-k8s.fullname" .) }}
{{- $names = append (without $names $hook) $hook }}
{{- end }}
{{- $names | toJson }}
{{- end }}

{{- define "dispatch-k8s.dispatchGroups" -}}
{{- .Values.webhook.dispatch.groups | toJson }}
{{- end }}

{{/*
A list of strings as a CEL list literal, written as Python's json.dumps writes it (the generators' form):
each string JSON-quoted (valid CEL escaping), ", " between them.
*/}}
{{- define "dispatch-k8s.celList" -}}
[{{ range $i, $s := . }}{{ if $i }}, {{ end }}{{ toJson $s }}{{ end }}]
{{- end }}

{{/* The directory the certificate controller writes tls.crt, tls.key and ca.crt to (a memory emptyDir). */}}
{{/* The logging flags every command takes (serving/logs.py). */}}
{{- define "dispatch-k8s.logArgs" -}}
- --log-level={{ .Values.logging.level }}
- --log-format={{ .Values.logging.format }}
{{- end }}

{{- define "dispatch-k8s.tlsDir" -}}
/run/dispatch/tls
{{- end }}

{{/* The user and group, each left out when null (the platform assigns it: OpenShift). */}}
{{- define "dispatch-k8s.runAs" -}}
{{- with .Values.securityContext.runAsUser }}
runAsUser: {{ . }}
{{- end }}
{{- with .Values.securityContext.runAsGroup }}
runAsGroup: {{ . }}
{{- end }}
{{- end }}

{{/* The pods' labels: the recommended ones, then commonLabels and podLabels (podLabels win). */}}
{{- define "dispatch-k8s.podLabels" -}}
{{ include "dispatch-k8s.recommendedLabels" . }}
{{- with merge (deepCopy .Values.podLabels) .Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{/* The restricted Pod Security Standard, for every container the chart runs. */}}
{{- define "dispatch-k8s.containerSecurityContext" -}}
allowPrivilegeEscalation: false
readOnlyRootFilesystem: true
runAsNonRoot: true
{{- include "dispatch-k8s.runAs" . }}
capabilities:
  drop:
    - ALL
seccompProfile:
  type: RuntimeDefault
{{- end }}

{{- define "dispatch-k8s.podSecurityContext" -}}
runAsNonRoot: true
{{- include "dispatch-k8s.runAs" . }}
{{- if and (eq .Values.certs.mode "cert-manager") .Values.securityContext.runAsGroup }}
fsGroup: {{ .Values.securityContext.runAsGroup }}
{{- end }}
seccompProfile:
  type: RuntimeDefault
{{- end }}
