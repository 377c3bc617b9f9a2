{{/* Names and labels. */}}
{{- define "mcpgw.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "mcpgw.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else if contains (include "mcpgw.name" .) .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name (include "mcpgw.name" .) | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "mcpgw.selectorLabels" -}}
app.kubernetes.io/name: {{ include "mcpgw.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "mcpgw.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{ include "mcpgw.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end -}}

{{- define "mcpgw.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) -}}
{{- end -}}

{{/* The Secret holding gw_mcp_config.json: the user's, or the one this chart renders. */}}
{{- define "mcpgw.secretName" -}}
{{- default (printf "%s-config" (include "mcpgw.fullname" .)) .Values.config.existingSecret -}}
{{- end -}}

{{- define "mcpgw.secretKey" -}}
{{- if .Values.config.existingSecret -}}{{ .Values.config.existingSecretKey }}{{- else -}}gw_mcp_config.json{{- end -}}
{{- end -}}

{{/*
The config file as JSON, computed once per render and cached, so that the Secret and the checksum annotation see the
same content: the `config.file` value, else the file already in this release's Secret (upgrades keep generated keys),
else a fresh one like `mcpgw init` writes (random keys from sprig's crypto/rand generator). Then `config.settings`,
the Redis values and, in shared mode, the allowed hosts (`shared.allowedHosts`, else the Service's DNS names when the
file names none) are merged into common_mcp_gateway_config.
*/}}
{{- define "mcpgw.configJson" -}}
{{- if not (hasKey .Values "__mcpgwConfigJson") -}}
{{- $cfg := dict -}}
{{- if .Values.config.file -}}
{{- $cfg = deepCopy .Values.config.file -}}
{{- else -}}
{{- $existing := lookup "v1" "Secret" .Release.Namespace (include "mcpgw.secretName" .) -}}
{{- if and $existing $existing.data (hasKey $existing.data "gw_mcp_config.json") -}}
{{- $cfg = index $existing.data "gw_mcp_config.json" | b64dec | fromJson -}}
{{- else -}}
{{- $now := now | date "2006-01-02T15:04:05.000000" -}}
{{- $configId := uuidv4 -}}
{{- $projectId := uuidv4 -}}
{{- $userId := uuidv4 -}}
{{- $gatewayKey := printf "gw_%s" (randAlphaNum 43) -}}
{{- $_ := set $cfg "admin_apikey" (randAlphaNum 43) -}}
{{- $_ := set $cfg "mcp_configs" (dict $configId (dict "mcp_config_name" "default_config" "created_at" $now "mcp_config" list)) -}}
{{- $_ := set $cfg "projects" (dict $projectId (dict "project_name" "default_project" "mcp_config_id" $configId "users" (list $userId) "created_at" $now)) -}}
{{- $_ := set $cfg "users" (dict $userId (dict "email" "default@example.com" "created_at" $now)) -}}
{{- $_ := set $cfg "apikeys" (dict $gatewayKey (dict "project_id" $projectId "user_id" $userId "created_at" $now "disabled" false)) -}}
{{- end -}}
{{- end -}}
{{- $common := deepCopy (default dict (get $cfg "common_mcp_gateway_config")) -}}
{{- $common = mustMergeOverwrite $common (deepCopy .Values.config.settings) -}}
{{- if .Values.redis.enabled -}}
{{- $_ := set $common "gw_mcp_use_external_cache" true -}}
{{- $_ := set $common "gw_cache_host" .Values.redis.host -}}
{{- $_ := set $common "gw_cache_port" (int .Values.redis.port) -}}
{{- $_ := set $common "gw_cache_db" (int .Values.redis.db) -}}
{{- if .Values.redis.password -}}
{{- $_ := set $common "gw_cache_password" .Values.redis.password -}}
{{- end -}}
{{- end -}}
{{- if and (eq .Values.mode "shared") (or .Values.shared.allowedHosts (not (hasKey $common "gw_allowed_hosts"))) -}}
{{- $hosts := .Values.shared.allowedHosts -}}
{{- if not $hosts -}}
{{- $svc := include "mcpgw.fullname" . -}}
{{- $ns := .Release.Namespace -}}
{{- $hosts = list $svc (printf "%s.%s" $svc $ns) (printf "%s.%s.svc" $svc $ns) (printf "%s.%s.svc.cluster.local" $svc $ns) "localhost" "127.0.0.1" "::1" -}}
{{- end -}}
{{- $_ := set $common "gw_allowed_hosts" $hosts -}}
{{- end -}}
{{- $_ := set $cfg "common_mcp_gateway_config" $common -}}
{{- $_ := set .Values "__mcpgwConfigJson" (toPrettyJson $cfg) -}}
{{- end -}}
{{- get .Values "__mcpgwConfigJson" -}}
{{- end -}}

{{/* Pod annotations: scrape hints, the optional config checksum, the user's. */}}
{{- define "mcpgw.podAnnotations" -}}
{{- if .Values.metrics.podAnnotations }}
prometheus.io/scrape: "true"
prometheus.io/port: "9464"
prometheus.io/path: /metrics
{{- end }}
{{- if and .Values.rolloutOnConfigChange (not .Values.config.existingSecret) }}
checksum/config: {{ include "mcpgw.configJson" . | sha256sum }}
{{- end }}
{{- with .Values.podAnnotations }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{/* What both modes' gateway containers share: image, ports, probes (startup, liveness, readiness), security context. */}}
{{- define "mcpgw.containerCommon" -}}
image: {{ include "mcpgw.image" . }}
imagePullPolicy: {{ .Values.image.pullPolicy }}
args: ["serve"]
ports:
  - name: gateway
    containerPort: 8000
    protocol: TCP
  - name: admin
    containerPort: 8001
    protocol: TCP
  - name: metrics
    containerPort: 9464
    protocol: TCP
startupProbe:
  {{- toYaml .Values.startupProbe | nindent 2 }}
livenessProbe:
  {{- toYaml .Values.livenessProbe | nindent 2 }}
readinessProbe:
  {{- toYaml .Values.readinessProbe | nindent 2 }}
securityContext:
  {{- toYaml .Values.securityContext | nindent 2 }}
{{- end -}}

{{- define "mcpgw.commonEnv" -}}
- name: HOME
  value: /home/mcpgw
{{- with .Values.extraEnv }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{/*
The sidecar container block, a native sidecar for the `initContainers:` list of an agent's pod (together with
mcpgw.sidecarVolumes in its `volumes:`): `restartPolicy: Always` makes it start before the agent (once its startup
probe passes) and stop after it. `mcpgw inject` writes the same container. The config Secret is mounted as a directory
(never subPath) so the kubelet's `..data` swap reaches the gateway, which reloads it; the admin API then answers
CONFIG_READ_ONLY to writes.
*/}}
{{- define "mcpgw.sidecarContainer" -}}
- name: mcpgw
  restartPolicy: Always
  {{- include "mcpgw.containerCommon" . | nindent 2 }}
  env:
    - name: GW_CONFIG_PATH
      value: /etc/mcpgw/{{ include "mcpgw.secretKey" . }}
    {{- if .Values.sidecar.loopbackOnly }}
    - name: GW_GATEWAY_ADDR
      value: 127.0.0.1:8000
    - name: GW_ADMIN_ADDR
      value: 127.0.0.1:8001
    {{- end }}
    {{- include "mcpgw.commonEnv" . | nindent 4 }}
  resources:
    {{- toYaml .Values.resources | nindent 4 }}
  volumeMounts:
    - name: mcpgw-config
      mountPath: /etc/mcpgw
      readOnly: true
    - name: mcpgw-tmp
      mountPath: /tmp
    - name: mcpgw-home
      mountPath: /home/mcpgw
{{- end -}}

{{- define "mcpgw.sidecarVolumes" -}}
- name: mcpgw-config
  secret:
    secretName: {{ include "mcpgw.secretName" . }}
    defaultMode: 0440
- name: mcpgw-tmp
  emptyDir:
    sizeLimit: {{ .Values.tmpSizeLimit }}
- name: mcpgw-home
  emptyDir:
    sizeLimit: {{ .Values.homeSizeLimit }}
{{- end -}}

{{- define "mcpgw.podMonitorSelector" -}}
{{- if .Values.metrics.podMonitor.selector -}}
{{ toYaml .Values.metrics.podMonitor.selector }}
{{- else if eq .Values.mode "sidecar" -}}
mcpgw.io/sidecar: "true"
{{- else -}}
{{ include "mcpgw.selectorLabels" . }}
{{- end -}}
{{- end -}}
