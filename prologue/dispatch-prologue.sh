# dispatch-prologue, run as: /bin/sh <this file> <command...> (every trainer pod, from the prologue's
# ConfigMap), or /bin/sh -c <this text> dispatch-prologue <command...>. It never reads $0, the one word
# that differs.
# Turns DISPATCH_K8S_* into DISPATCH_EPOCH and DISPATCH_ATTEMPT, unsets DISPATCH_K8S_*, enters the
# WorkDir and execs the command. A refusal exits 125 with one line on stderr. POSIX sh without
# set -e or set -u: every check is explicit, and no number is used before its digits are counted.
# Why each line is as it is: docs/prologue.md.
dispatch_k8s_refuse() {
  printf 'dispatch: %s\n' "$1" >&2
  exit "${2:-125}"
}
dispatch_k8s_bad() {
  case $2 in
    *[!"0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz ./_:@%+=,~-"]*)
      DISPATCH_K8S_SHOWN="(${#2} characters, not shown)" ;;
    *) if [ "${#2}" -gt 64 ]; then DISPATCH_K8S_SHOWN="(${#2} characters, not shown)"; else DISPATCH_K8S_SHOWN="'$2'"; fi ;;
  esac
  dispatch_k8s_refuse "$1 $DISPATCH_K8S_SHOWN: $3" "${4:-125}"
}
dispatch_k8s_decimal() {
  case $1 in '' | *[!0123456789]* | 0?*) return 1 ;; esac
  return 0
}
dispatch_k8s_count() {
  [ -n "$2" ] || dispatch_k8s_refuse "$1 is not set"
  [ -n "$3" ] || dispatch_k8s_refuse "$1 is empty: $4 is missing"
  dispatch_k8s_decimal "$3" || dispatch_k8s_bad "$1" "$3" "not a decimal number without leading zeros"
  [ "${#3}" -le 6 ] || dispatch_k8s_bad "$1" "$3" "A + J must stay below 1000000"
}

[ "$#" -gt 0 ] || dispatch_k8s_refuse "no command after dispatch-prologue"
case $1 in
  '') dispatch_k8s_refuse "the command's first word is empty" ;;
  -*) dispatch_k8s_bad "the command" "$1" "begins with -, which exec would take as an option" ;;
esac

dispatch_k8s_count DISPATCH_K8S_ADMISSION "${DISPATCH_K8S_ADMISSION+set}" "${DISPATCH_K8S_ADMISSION-}" "the pod annotation dispatch.phpboyscout.uk/admission"
dispatch_k8s_count DISPATCH_K8S_RESTART "${DISPATCH_K8S_RESTART+set}" "${DISPATCH_K8S_RESTART-}" "the pod label jobset.sigs.k8s.io/restart-attempt"
[ "$DISPATCH_K8S_ADMISSION" != 0 ] || dispatch_k8s_bad DISPATCH_K8S_ADMISSION 0 "no gate admitted this pod, so dispatch did not start it"
DISPATCH_K8S_R=$((DISPATCH_K8S_ADMISSION + DISPATCH_K8S_RESTART))
[ "$DISPATCH_K8S_R" -lt 1000000 ] || dispatch_k8s_refuse "DISPATCH_K8S_ADMISSION + DISPATCH_K8S_RESTART = $DISPATCH_K8S_R: R reached the epoch bound 1000000"

[ -n "${DISPATCH_K8S_EPOCH_PREFIX+set}" ] || dispatch_k8s_refuse "DISPATCH_K8S_EPOCH_PREFIX is not set"
DISPATCH_K8S_N=0
if [ -n "$DISPATCH_K8S_EPOCH_PREFIX" ]; then
  case $DISPATCH_K8S_EPOCH_PREFIX in
    0* | *[!0123456789]*) dispatch_k8s_bad DISPATCH_K8S_EPOCH_PREFIX "$DISPATCH_K8S_EPOCH_PREFIX" "not a decimal number without leading zeros, nor empty (G = N = 0)" ;;
  esac
  [ "${#DISPATCH_K8S_EPOCH_PREFIX}" -le 13 ] || dispatch_k8s_bad DISPATCH_K8S_EPOCH_PREFIX "$DISPATCH_K8S_EPOCH_PREFIX" "more than 13 digits"
  DISPATCH_K8S_N=$DISPATCH_K8S_EPOCH_PREFIX
  if [ "${#DISPATCH_K8S_EPOCH_PREFIX}" -gt 6 ]; then
    DISPATCH_K8S_G=${DISPATCH_K8S_EPOCH_PREFIX%??????}
    [ "${#DISPATCH_K8S_G}" -lt 7 ] || [ "$DISPATCH_K8S_G" -le 9223371 ] || dispatch_k8s_bad DISPATCH_K8S_EPOCH_PREFIX "$DISPATCH_K8S_EPOCH_PREFIX" "G = $DISPATCH_K8S_G is above 9223371, so the epoch would not fit in 64 bits"
    DISPATCH_K8S_N=${DISPATCH_K8S_EPOCH_PREFIX#"$DISPATCH_K8S_G"}
    while case $DISPATCH_K8S_N in 0?*) true ;; *) false ;; esac; do DISPATCH_K8S_N=${DISPATCH_K8S_N#0}; done
  fi
fi

[ -n "${DISPATCH_K8S_TOKEN_PREFIX+set}" ] || dispatch_k8s_refuse "DISPATCH_K8S_TOKEN_PREFIX is not set"
case $DISPATCH_K8S_TOKEN_PREFIX in
  *.*.*.*) dispatch_k8s_bad DISPATCH_K8S_TOKEN_PREFIX "$DISPATCH_K8S_TOKEN_PREFIX" "not <JobID>.<N>.<attempt>" ;;
  *.*.*) ;;
  *) dispatch_k8s_bad DISPATCH_K8S_TOKEN_PREFIX "$DISPATCH_K8S_TOKEN_PREFIX" "not <JobID>.<N>.<attempt>" ;;
esac
DISPATCH_K8S_ID=${DISPATCH_K8S_TOKEN_PREFIX%%.*}
DISPATCH_K8S_REST=${DISPATCH_K8S_TOKEN_PREFIX#*.}
DISPATCH_K8S_TN=${DISPATCH_K8S_REST%%.*}
case $DISPATCH_K8S_ID in
  [01234567]*[!0123456789ABCDEFGHJKMNPQRSTVWXYZ]* | [!01234567]*) DISPATCH_K8S_ID= ;;
esac
[ "${#DISPATCH_K8S_ID}" -eq 26 ] || dispatch_k8s_bad DISPATCH_K8S_TOKEN_PREFIX "$DISPATCH_K8S_TOKEN_PREFIX" "the JobID is not a ULID in canonical upper case"
dispatch_k8s_decimal "$DISPATCH_K8S_TN" || dispatch_k8s_bad DISPATCH_K8S_TOKEN_PREFIX "$DISPATCH_K8S_TOKEN_PREFIX" "N is not a decimal number without leading zeros"
[ "${#DISPATCH_K8S_TN}" -le 6 ] || dispatch_k8s_bad DISPATCH_K8S_TOKEN_PREFIX "$DISPATCH_K8S_TOKEN_PREFIX" "N is not below 1000000"
dispatch_k8s_decimal "${DISPATCH_K8S_REST#*.}" || dispatch_k8s_bad DISPATCH_K8S_TOKEN_PREFIX "$DISPATCH_K8S_TOKEN_PREFIX" "the attempt is not a decimal number without leading zeros"
[ "$DISPATCH_K8S_TN" = "$DISPATCH_K8S_N" ] || dispatch_k8s_refuse "DISPATCH_K8S_TOKEN_PREFIX has N = $DISPATCH_K8S_TN but DISPATCH_K8S_EPOCH_PREFIX has N = $DISPATCH_K8S_N"

if [ -n "${DISPATCH_K8S_WORKDIR-}" ]; then
  DISPATCH_K8S_DIR=$DISPATCH_K8S_WORKDIR
  case $DISPATCH_K8S_DIR in /*) ;; *) DISPATCH_K8S_DIR=./$DISPATCH_K8S_DIR ;; esac
  cd "$DISPATCH_K8S_DIR" 2>/dev/null || dispatch_k8s_bad DISPATCH_K8S_WORKDIR "$DISPATCH_K8S_WORKDIR" "cannot enter it"
fi

case $1 in
  */*)
    [ -e "$1" ] || dispatch_k8s_bad "the command" "$1" "does not exist" 127
    [ -f "$1" ] || dispatch_k8s_bad "the command" "$1" "not a file" 126
    [ -x "$1" ] || dispatch_k8s_bad "the command" "$1" "not executable" 126
    ;;
  *)
    if [ -n "${PATH+set}" ]; then
      DISPATCH_K8S_FOUND=
      DISPATCH_K8S_REST=$PATH:
      while [ -z "$DISPATCH_K8S_FOUND" ] && [ -n "$DISPATCH_K8S_REST" ]; do
        DISPATCH_K8S_DIR=${DISPATCH_K8S_REST%%:*}
        DISPATCH_K8S_REST=${DISPATCH_K8S_REST#*:}
        if [ -f "${DISPATCH_K8S_DIR:-.}/$1" ] && [ -x "${DISPATCH_K8S_DIR:-.}/$1" ]; then DISPATCH_K8S_FOUND=yes; fi
      done
      [ -n "$DISPATCH_K8S_FOUND" ] || dispatch_k8s_bad "the command" "$1" "not found in PATH" 127
    fi
    ;;
esac

DISPATCH_ATTEMPT=$DISPATCH_K8S_TOKEN_PREFIX.$DISPATCH_K8S_ADMISSION.$DISPATCH_K8S_RESTART
DISPATCH_EPOCH=$DISPATCH_K8S_R
if [ -n "$DISPATCH_K8S_EPOCH_PREFIX" ]; then
  case ${#DISPATCH_EPOCH} in
    1) DISPATCH_EPOCH=00000$DISPATCH_EPOCH ;;
    2) DISPATCH_EPOCH=0000$DISPATCH_EPOCH ;;
    3) DISPATCH_EPOCH=000$DISPATCH_EPOCH ;;
    4) DISPATCH_EPOCH=00$DISPATCH_EPOCH ;;
    5) DISPATCH_EPOCH=0$DISPATCH_EPOCH ;;
  esac
  DISPATCH_EPOCH=$DISPATCH_K8S_EPOCH_PREFIX$DISPATCH_EPOCH
fi
export DISPATCH_EPOCH DISPATCH_ATTEMPT
unset DISPATCH_K8S_ADMISSION DISPATCH_K8S_RESTART DISPATCH_K8S_EPOCH_PREFIX DISPATCH_K8S_TOKEN_PREFIX DISPATCH_K8S_WORKDIR \
  DISPATCH_K8S_SHOWN DISPATCH_K8S_R DISPATCH_K8S_N DISPATCH_K8S_G DISPATCH_K8S_ID DISPATCH_K8S_REST DISPATCH_K8S_TN \
  DISPATCH_K8S_DIR DISPATCH_K8S_FOUND
exec "$@"
