{{/* The chart's name, cut to 63 characters (a DNS label). */}}
{{- define "gpufleet.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
The release's full name, the prefix of every object. Cut to 42 characters so
that "-server-headless" and a StatefulSet pod's ordinal still fit a DNS label.
*/}}
{{- define "gpufleet.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 42 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 42 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 42 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{/* Labels on every object. */}}
{{- define "gpufleet.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
app.kubernetes.io/name: {{ include "gpufleet.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{/* Selector labels of the server's pods. */}}
{{- define "gpufleet.serverSelectorLabels" -}}
app.kubernetes.io/name: {{ include "gpufleet.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: server
{{- end }}

{{/* Selector labels of the agents' pods. */}}
{{- define "gpufleet.agentSelectorLabels" -}}
app.kubernetes.io/name: {{ include "gpufleet.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: agent
{{- end }}

{{/* The image, its tag defaulting to the chart's appVersion. */}}
{{- define "gpufleet.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}

{{/* The ServiceAccount the pods run as. */}}
{{- define "gpufleet.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "gpufleet.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/* The Secret holding admin-token and join-token. */}}
{{- define "gpufleet.tokensSecret" -}}
{{- default (printf "%s-tokens" (include "gpufleet.fullname" .)) .Values.tokens.existingSecret }}
{{- end }}

{{/* Whether the store is PostgreSQL ("true") or SQLite (""). */}}
{{- define "gpufleet.postgres" -}}
{{- if or .Values.server.postgres.url .Values.server.postgres.existingSecret }}true{{ end }}
{{- end }}

{{/* http or https, as the server serves. */}}
{{- define "gpufleet.scheme" -}}
{{- if .Values.server.tls.existingSecret }}https{{ else }}http{{ end }}
{{- end }}

{{/*
The servers' URLs for the agents: every replica by its stable name under the
headless Service, in ordinal order. docs/HA.md: agents should heartbeat the
leader and list the replicas in the same order, so that they stick to one;
the ClusterIP Service would spread their heartbeats over the replicas.
*/}}
{{- define "gpufleet.serverURLs" -}}
{{- $full := include "gpufleet.fullname" . }}
{{- $urls := list }}
{{- range $i := until (int .Values.server.replicas) }}
{{- $urls = append $urls (printf "%s://%s-server-%d.%s-server-headless.%s.svc:%d" (include "gpufleet.scheme" $) $full $i $full $.Release.Namespace (int $.Values.server.port)) }}
{{- end }}
{{- join "," $urls }}
{{- end }}

{{/*
Flags given as a map (flag: value) as GPUFLEET_<FLAG> environment variables,
in the order of their names.
*/}}
{{- define "gpufleet.flagEnv" -}}
{{- range $flag, $value := . }}
- name: {{ printf "GPUFLEET_%s" ($flag | upper | replace "-" "_") }}
  value: {{ $value | toString | quote }}
{{- end }}
{{- end }}
