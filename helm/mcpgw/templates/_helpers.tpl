{{/* Values this chart no longer reads, refused rather than ignored (included by secret.yaml, always rendered). */}}
{{- define "mcpgw.checkValues" -}}
{{- if or (hasKey .Values.redis "host") (hasKey .Values.redis "password") -}}
{{- fail "redis.host, redis.port, redis.db and redis.password moved to redis.external (an existing Redis); redis.enabled now deploys a Redis with the chart" -}}
{{- end -}}
{{- end -}}

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
the Redis connection (`redis.enabled` or `redis.external`), the config store (`configStore.type`), the session secret
and, in shared mode, the allowed hosts (`shared.allowedHosts`, else the Service's DNS names when the file names none)
are merged into common_mcp_gateway_config. The session secret is `sessionSecret`, else the file's, else the one in
this release's Secret (upgrades keep it, so sessions survive them), else 48 random characters.
*/}}
{{- define "mcpgw.configJson" -}}
{{- if not (hasKey .Values "__mcpgwConfigJson") -}}
{{- $cfg := dict -}}
{{- $previous := dict -}}
{{- $existing := lookup "v1" "Secret" .Release.Namespace (include "mcpgw.secretName" .) -}}
{{- if and $existing $existing.data (hasKey $existing.data "gw_mcp_config.json") -}}
{{- $previous = index $existing.data "gw_mcp_config.json" | b64dec | fromJson -}}
{{- end -}}
{{- if .Values.config.file -}}
{{- $cfg = deepCopy .Values.config.file -}}
{{- else -}}
{{- if $previous -}}
{{- $cfg = deepCopy $previous -}}
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
{{- $redis := include "mcpgw.redisConnection" . | fromJson -}}
{{- if $redis.host -}}
{{- $_ := set $common "gw_mcp_use_external_cache" true -}}
{{- $_ := set $common "gw_cache_host" $redis.host -}}
{{- $_ := set $common "gw_cache_port" (int $redis.port) -}}
{{- $_ := set $common "gw_cache_db" (int $redis.db) -}}
{{- if $redis.password -}}
{{- $_ := set $common "gw_cache_password" $redis.password -}}
{{- end -}}
{{- end -}}
{{- $store := include "mcpgw.configStoreType" . -}}
{{- if eq $store "redis" -}}
{{- if not $redis.host -}}
{{- fail (printf "the config store is Redis (configStore.type %s, mode %s, shared.replicaCount %v: replicas share one configuration through Redis): set redis.enabled=true (or auto) to deploy a small Redis with the chart, or redis.external.host for yours; or run one replica (shared.replicaCount=1) with configStore.type=file" .Values.configStore.type .Values.mode .Values.shared.replicaCount) -}}
{{- end -}}
{{- $_ := set $common "config_store" (dict "type" "redis") -}}
{{- else if not (hasKey $common "config_store") -}}
{{- $_ := set $common "config_store" (dict "type" "file") -}}
{{- end -}}
{{- $previousSecret := get (default dict (get $previous "common_mcp_gateway_config")) "session_secret" -}}
{{- $_ := set $common "session_secret" (.Values.sessionSecret | default (get $common "session_secret") | default $previousSecret | default (randAlphaNum 48)) -}}
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

{{/*
Where the configuration lives: `configStore.type`, where `auto` is redis in shared mode with more than one replica
(every replica must see every admin write) and file otherwise.
*/}}
{{- define "mcpgw.configStoreType" -}}
{{- if ne .Values.configStore.type "auto" -}}
{{- .Values.configStore.type -}}
{{- else if and (eq .Values.mode "shared") (gt (int .Values.shared.replicaCount) 1) -}}
redis
{{- else -}}
file
{{- end -}}
{{- end -}}

{{/*
Whether the chart deploys its own Redis: `redis.enabled` true, or `auto` (the default) when the config store is
Redis and neither `redis.external.host` nor `config.existingSecret` says where one is, so that `--set mode=shared`
alone installs a working shared gateway. "true" or empty.
*/}}
{{- define "mcpgw.redisDeployed" -}}
{{- $enabled := .Values.redis.enabled -}}
{{- if eq (toString $enabled) "true" -}}
true
{{- else if and (eq (toString $enabled) "auto") (eq (include "mcpgw.configStoreType" .) "redis") (not .Values.redis.external.host) (not .Values.config.existingSecret) -}}
true
{{- end -}}
{{- end -}}

{{/*
The Redis the gateway uses (config store and shared tool cache), as JSON: the chart's own (`mcpgw.redisDeployed`) or
`redis.external`; no host when neither.
*/}}
{{- define "mcpgw.redisConnection" -}}
{{- if include "mcpgw.redisDeployed" . -}}
{{- dict "host" (printf "%s-redis.%s.svc" (include "mcpgw.fullname" .) .Release.Namespace) "port" 6379 "db" 0 "password" (include "mcpgw.redisPassword" .) | toJson -}}
{{- else if .Values.redis.external.host -}}
{{- pick .Values.redis.external "host" "port" "db" "password" | toJson -}}
{{- else -}}
{{- dict | toJson -}}
{{- end -}}
{{- end -}}

{{/*
The password of the chart's Redis: the one in its Secret when the release has it (upgrades keep it), else 32 random
characters; computed once per render.
*/}}
{{- define "mcpgw.redisPassword" -}}
{{- if not (hasKey .Values "__mcpgwRedisPassword") -}}
{{- $existing := lookup "v1" "Secret" .Release.Namespace (printf "%s-redis" (include "mcpgw.fullname" .)) -}}
{{- if and $existing $existing.data (hasKey $existing.data "password") -}}
{{- $_ := set .Values "__mcpgwRedisPassword" (index $existing.data "password" | b64dec) -}}
{{- else -}}
{{- $_ := set .Values "__mcpgwRedisPassword" (randAlphaNum 32) -}}
{{- end -}}
{{- end -}}
{{- get .Values "__mcpgwRedisPassword" -}}
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
