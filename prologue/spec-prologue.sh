set -eu
if [ -n "${DISPATCH_K8S_WORKDIR:-}" ]; then
  cd "$DISPATCH_K8S_WORKDIR" || { echo "dispatch: cannot enter $DISPATCH_K8S_WORKDIR" >&2; exit 125; }
fi
case "$DISPATCH_K8S_ADMISSION$DISPATCH_K8S_RESTART" in *[!0-9]*) false ;; esac &&
  [ -n "$DISPATCH_K8S_ADMISSION" ] && [ -n "$DISPATCH_K8S_RESTART" ] ||
  { echo "dispatch: admission or restart count missing or not a number" >&2; exit 125; }
R=$((DISPATCH_K8S_ADMISSION + DISPATCH_K8S_RESTART))
if [ "$R" -ge 1000000 ]; then echo "dispatch: restart count $R reached the epoch bound" >&2; exit 125; fi
DISPATCH_EPOCH=$(printf '%s%06d' "$DISPATCH_K8S_EPOCH_PREFIX" "$R")
DISPATCH_ATTEMPT="$DISPATCH_K8S_TOKEN_PREFIX.$DISPATCH_K8S_ADMISSION.$DISPATCH_K8S_RESTART"
export DISPATCH_EPOCH DISPATCH_ATTEMPT
unset DISPATCH_K8S_ADMISSION DISPATCH_K8S_RESTART DISPATCH_K8S_EPOCH_PREFIX DISPATCH_K8S_TOKEN_PREFIX DISPATCH_K8S_WORKDIR
exec "$@"
