#!/usr/bin/env bash
# Only the job's own ranks get into its rendezvous store (docs/security.md), end to end with the
# real launcher and the gpt example on 2 ranks:
#  1. an undisturbed run (the secret given to dscpp in its environment) for the reference losses;
#  2. the same run with a secret dscpp makes, attacked while it trains (tests/tools/store_probe):
#     no secret, a wrong secret and a replayed handshake are each refused without reading or
#     writing a key, and 500 connections that never authenticate, held 7 s, are shed — the store
#     keeps at most 64 of them after 1 s and none after its 5 s handshake deadline — while the
#     run goes on: its losses are the reference's, no 100-step window runs below 0.2 of the
#     reference's median rate (a stall of 1 s would; the probe's own 500 connections take a core
#     from a 2-core machine, which halves the rate while they open), and it takes at most its
#     share of the reference's time + 30 s;
#  3. the secret of both runs is in no /proc/PID/cmdline (sampled while they run), no log and no
#     file of the save directory; --dry_run names it without its value, mpirun gets `-x NAME`;
#  4. ranks started by a script: without a secret they refuse to start naming both variables; a
#     group-readable DSCPP_JOB_SECRET_FILE is refused; a rank with another secret is refused and
#     named (in its own error and in rank 0's log); DSCPP_INSECURE_STORE=1 runs, warning on every rank;
#  5. (root, with network namespaces) two hosts over the ssh runner (tests/testbed): the secret
#     travels on the SSH channel, the store listens on node1's address, the run trains, the
#     probe's attacks from outside the hosts are refused, and the secret is on no command line.
# Usage: store_auth.sh DSCPP RUNTIME GPT_SO STORE_PROBE [SOURCE_ROOT]   (STORE_AUTH_KEEP=1 keeps its work directory)
set -u
DSCPP=$1 RUNTIME=$2 GPT=$3 PROBE=$4 SRC=${5:-$(dirname "$0")/../..}
WORK=$(mktemp -d /tmp/dscpp_store_auth.XXXXXX)
JOBS=()
cleanup() { for p in "${JOBS[@]}"; do kill "$p" 2>/dev/null; done; rm -rf "$WORK"; }
trap cleanup EXIT
[ -n "${STORE_AUTH_KEEP:-}" ] && trap - EXIT
FAILED=0
fail() { echo "FAIL: $*"; FAILED=1; }
pass() { echo "ok: $*"; }
. "$(dirname "$0")/free_port.sh"  # port
unset DSCPP_JOB_SECRET DSCPP_JOB_SECRET_FILE DSCPP_INSECURE_STORE DSCPP_STORE_BIND
umask 077

/usr/bin/python3 - "$WORK" <<'PY'
import struct, sys
n = 20000
toks = [(i * 7) % 50 for i in range(n)]
with open(f"{sys.argv[1]}/seq.bin", "wb") as f:
    f.write(struct.pack("<256i", 20240520, 1, n, *([0] * 253)))
    f.write(struct.pack(f"<{n}H", *toks))
PY
cat > "$WORK/c.json" <<JSON
{"train_micro_batch_size_per_gpu": 8, "steps_per_print": 100, "zero_optimization": {"stage": 2},
 "optimizer": {"type": "AdamW", "params": {"lr": 0.003}}}
JSON
# ~12 s on an idle 2-core machine (the sanitizer build, several times slower, runs fewer): the
# attacked run below is scaled to last long enough to be attacked while it trains.
STEPS=${DSCPP_STORE_AUTH_STEPS:-2000}
MODEL=(-- --tokens "$WORK/seq.bin" --vocab_size 64 --layers 2 --d_model 64 --heads 2 --context 32)
# The losses by step, without the run's total (the attacked run is longer; a constant LR makes
# its first steps the reference's).
losses() { grep -oE 'step [0-9]+/[0-9]+ \| loss [0-9.]+' "$1" | sed 's#/[0-9]*##'; }
now() { date +%s.%N; }

# The secret as a grep pattern file (never on a command line here either).
pattern() { printf '%s\n' "$1" > "$WORK/secret.pat"; }
# Fails when any process's command line holds the secret in secret.pat.
check_cmdlines() {  # WHAT
  local p hits=""
  for p in /proc/[0-9]*; do
    { tr '\0' ' ' < "$p/cmdline"; } 2>/dev/null | grep -qF -f "$WORK/secret.pat" && hits="$hits ${p#/proc/}"
  done
  [ -z "$hits" ] && pass "$1: the secret is on no process's command line" ||
    fail "$1: the secret is on the command line of pids$hits: $(tr '\0' ' ' < "/proc/${hits# }/cmdline" 2>/dev/null)"
}
check_files() {  # WHAT FILE_OR_DIR...
  local what=$1 hits
  shift
  hits=$(grep -rlF -f "$WORK/secret.pat" "$@" 2>/dev/null)
  [ -z "$hits" ] && pass "$what: the secret is in none of $*" || fail "$what: the secret is written in $hits"
}
# The pids of the job's ranks: dscpp-runtime processes (not the shells and agents whose command
# lines name it) training into save directory $1.
rank_pids() { pgrep -f "^[^ ]*dscpp-runtime .*--save_dir $1" || true; }
# Waits (up to 60 s) until the run logging to $1 has printed step 100.
wait_training() { for _ in $(seq 1 600); do grep -q "step 100/" "$1" 2>/dev/null && return 0; sleep 0.1; done; return 1; }
secret_of() {  # PID: its DSCPP_JOB_SECRET
  tr '\0' '\n' < "/proc/$1/environ" 2>/dev/null | sed -n 's/^DSCPP_JOB_SECRET=//p'
}

# ---- 1. the reference run: a secret given to dscpp ------------------------------------------
given=$(od -An -tx1 -N32 /dev/urandom | tr -d ' \n')
start=$(now)
DSCPP_JOB_SECRET=$given "$DSCPP" --num_procs 2 --master_port "$(port)" "$GPT" --deepspeed_config "$WORK/c.json" \
  --steps $STEPS --no_eval --save_dir "$WORK/ref" "${MODEL[@]}" > "$WORK/ref.log" 2>&1 &
job=$!
JOBS+=("$job")
pattern "$given"
if wait_training "$WORK/ref.log"; then
  pids=$(rank_pids "$WORK/ref")
  seen=0
  for p in $pids; do [ "$(secret_of "$p")" = "$given" ] && seen=$((seen + 1)); done
  [ "$seen" = 2 ] && pass "reference: both ranks got the secret given to dscpp" ||
    fail "reference: $seen of the ranks ($pids) have the given secret in their environment"
  check_cmdlines "reference run"
fi
wait "$job" || fail "reference run: $(tail -3 "$WORK/ref.log")"
ref_seconds=$(awk -v a="$(now)" -v b="$start" 'BEGIN { printf "%.1f", a - b }')
check_files "reference run" "$WORK/ref.log" "$WORK/ref"
[ "$(losses "$WORK/ref.log" | wc -l)" = $((STEPS / 100)) ] || fail "reference: expected $((STEPS / 100)) loss lines"

# ---- 2. the attacked run: a secret dscpp makes ----------------------------------------------
# Long enough to be attacked while it trains however fast this machine is: at least 30 s, as the
# reference ran (the attacks and the 7 s flood take about 10 s after step 100).
scale=$(awk -v f="$ref_seconds" 'BEGIN { k = int(30 / f) + 1; print (k < 2 ? 2 : k) }')
ATTACK_STEPS=$((STEPS * scale))
P=$(port)
start=$(now)
"$DSCPP" --num_procs 2 --master_port "$P" "$GPT" --deepspeed_config "$WORK/c.json" --steps $ATTACK_STEPS \
  --no_eval --save_dir "$WORK/run" "${MODEL[@]}" > "$WORK/run.log" 2>&1 &
job=$!
JOBS+=("$job")
secret=""
if wait_training "$WORK/run.log"; then
  pids=$(rank_pids "$WORK/run")
  s0=$(secret_of "$(echo "$pids" | head -1)") s1=$(secret_of "$(echo "$pids" | tail -1)")
  [ ${#s0} = 64 ] && [ "$s0" = "$s1" ] && [ "$s0" != "$given" ] && secret=$s0 &&
    pass "attacked run: both ranks have the same fresh 64-hex-digit secret dscpp made" ||
    fail "attacked run: the ranks' secrets are '${#s0} chars' and '${#s1} chars', equal: $([ "$s0" = "$s1" ] && echo yes)"
  pattern "$secret"
  check_cmdlines "attacked run"
  DSCPP_JOB_SECRET=$secret "$PROBE" 127.0.0.1 "$P" attack > "$WORK/attack.txt" 2>&1 &&
    pass "attacks refused: $(grep -c '^refused' "$WORK/attack.txt") of 3, and nothing written" ||
    fail "attacks: $(cat "$WORK/attack.txt")"
  sed 's/^/    /' "$WORK/attack.txt"
  if "$PROBE" 127.0.0.1 "$P" flood 500 7 > "$WORK/flood.txt" 2>&1; then
    pass "$(cat "$WORK/flood.txt")"
  else
    fail "flood: $(cat "$WORK/flood.txt")"
  fi
  kill -0 "$job" 2>/dev/null && pass "the run was still training when the flood ended" ||
    fail "the run ended before the flood did: the flood did not overlap training"
else
  fail "attacked run: training never started: $(tail -5 "$WORK/run.log")"
fi
wait "$job" || fail "attacked run failed: $(tail -5 "$WORK/run.log")"
run_seconds=$(awk -v a="$(now)" -v b="$start" 'BEGIN { printf "%.1f", a - b }')
first() { losses "$WORK/run.log" | head -n $((STEPS / 100)); }
if [ "$(losses "$WORK/ref.log")" = "$(first)" ]; then
  pass "attacked run: its first $(first | wc -l) losses are the reference's ($(first | tail -1))"
else
  fail "attacked run: losses differ: $(diff <(losses "$WORK/ref.log") <(first) | head -4)"
fi
# A stall shows in the step log: each line's rate is over its 100 steps (~0.25 s at ~6000
# samples/s), so a window that held a 1 s stall runs at under 0.2 of the usual rate; the probe
# opening its connections beside the ranks halves it on 2 cores (measured 0.49), a stall does more.
rates() { grep -oE '[0-9.]+ samples/s' "$1" | awk '{print $1}' | sort -g; }
median_ref=$(rates "$WORK/ref.log" | awk '{v[NR] = $1} END { print v[int((NR + 1) / 2)] }')
slowest=$(rates "$WORK/run.log" | head -1)
awk -v s="$slowest" -v m="$median_ref" 'BEGIN { exit !(s >= 0.2 * m) }' &&
  pass "no stall: the attacked run's slowest 100 steps ran at $slowest samples/s, the reference's median" \
    "$median_ref (bound: 0.2 of it)" ||
  fail "the attacked run stalled: its slowest 100 steps ran at $slowest samples/s, the reference's median is $median_ref"
awk -v r="$run_seconds" -v f="$ref_seconds" -v k="$scale" 'BEGIN { exit !(r < k * f + 30) }' &&
  pass "attacked run took $run_seconds s for $scale times the reference's steps, the reference $ref_seconds s" \
    "(bound: $scale × reference + 30 s)" ||
  fail "attacked run took ${run_seconds} s against $scale × the reference's ${ref_seconds} s: the attacks stalled it"
grep -q "rendezvous store: refused a connection from 127.0.0.1" "$WORK/run.log" &&
  pass "rank 0 logged the refusals: $(grep -c 'refused a connection' "$WORK/run.log") line(s) for" \
    "$(grep -o 'refused [0-9]* connections' "$WORK/run.log")" ||
  fail "rank 0 logged no refusal"
[ "$(grep -c 'refused a connection' "$WORK/run.log")" -le 1 ] ||
  fail "refusals are not rate-limited per address: $(grep -c 'refused a connection' "$WORK/run.log") lines"
[ -n "$secret" ] && check_files "attacked run" "$WORK/run.log" "$WORK/run" "$WORK/attack.txt" "$WORK/flood.txt"

# ---- 3. what the launcher prints ------------------------------------------------------------
DSCPP_JOB_SECRET=$given "$DSCPP" --dry_run --num_procs 2 "$GPT" > "$WORK/dry.txt" 2>&1
pattern "$given"
grep -q "^  DSCPP_JOB_SECRET=(not shown: from DSCPP_JOB_SECRET)$" "$WORK/dry.txt" &&
  pass "--dry_run names the secret without its value" || fail "--dry_run: $(grep SECRET "$WORK/dry.txt")"
check_files "--dry_run (local)" "$WORK/dry.txt"
if command -v mpirun > /dev/null; then
  DSCPP_JOB_SECRET=$given "$DSCPP" --dry_run --launcher openmpi --num_procs 2 "$GPT" > "$WORK/dry_mpi.txt" 2>&1
  grep -q -- "-x DSCPP_JOB_SECRET " "$WORK/dry_mpi.txt" && pass "mpirun is told -x DSCPP_JOB_SECRET, without the value" ||
    fail "mpirun command: $(grep mpirun "$WORK/dry_mpi.txt")"
  check_files "--dry_run (openmpi)" "$WORK/dry_mpi.txt"
fi
"$DSCPP" --dry_run --num_procs 2 --env "DSCPP_JOB_SECRET=$given" "$GPT" > "$WORK/env.txt" 2>&1 &&
  fail "--env DSCPP_JOB_SECRET=... was accepted" ||
  { grep -q "cannot be exported this way" "$WORK/env.txt" && pass "--env DSCPP_JOB_SECRET is refused" ||
    fail "--env DSCPP_JOB_SECRET: $(cat "$WORK/env.txt")"; }

# ---- 4. ranks started by a script -----------------------------------------------------------
rank() {  # RANK PORT LOG [VAR=VALUE...]: dscpp-runtime as one of 2 ranks, in the background
  local r=$1 p=$2 log=$3
  shift 3
  env RANK=$r LOCAL_RANK=$r WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=$p DSCPP_RENDEZVOUS_TIMEOUT=5 "$@" \
    "$RUNTIME" --model "$GPT" --deepspeed_config "$WORK/c.json" --steps 20 --no_eval "${MODEL[@]}" > "$log" 2>&1 &
}
rank 0 "$(port)" "$WORK/none.log"
wait $! && fail "a rank without a secret started" ||
  { grep -q "no job secret.*DSCPP_JOB_SECRET or in a file named by DSCPP_JOB_SECRET_FILE" "$WORK/none.log" &&
    pass "no secret: refused, naming both variables" || fail "no secret: $(tail -2 "$WORK/none.log")"; }

printf '%s\n' "$given" > "$WORK/secret.txt"
chmod 640 "$WORK/secret.txt"
rank 0 "$(port)" "$WORK/readable.log" DSCPP_JOB_SECRET_FILE="$WORK/secret.txt"
wait $! && fail "a group-readable secret file was accepted" ||
  { grep -q "DSCPP_JOB_SECRET_FILE=$WORK/secret.txt: mode 640.*chmod 600" "$WORK/readable.log" &&
    pass "a group-readable secret file is refused: $(grep -o 'mode 640[^;]*' "$WORK/readable.log")" ||
    fail "readable secret file: $(tail -2 "$WORK/readable.log")"; }
chmod 600 "$WORK/secret.txt"

P=$(port)
other=$(od -An -tx1 -N32 /dev/urandom | tr -d ' \n')
rank 0 "$P" "$WORK/w0.log" DSCPP_JOB_SECRET_FILE="$WORK/secret.txt"
r0=$!
rank 1 "$P" "$WORK/w1.log" DSCPP_JOB_SECRET="$other"
r1=$!
wait $r1 && fail "rank 1 with another secret joined" ||
  { grep -q "the handshake of rank 1 (pid [0-9]* on [^)]*) failed: .*does not match the job's secret" "$WORK/w1.log" &&
    pass "a rank with another secret is refused: $(grep -o 'the handshake of rank 1 ([^)]*) failed' "$WORK/w1.log")" ||
    fail "wrong secret, rank 1: $(tail -2 "$WORK/w1.log")"; }
wait $r0 && fail "rank 0 trained without rank 1" ||
  { grep -q "refused a connection from 127.0.0.1 (rank 1 (pid [0-9]* on [^)]*), by its own account): its proof" \
      "$WORK/w0.log" &&
    pass "rank 0 names the refused rank: $(grep -o 'refused a connection from [^:]*' "$WORK/w0.log")" ||
    fail "wrong secret, rank 0's log: $(grep -E 'refused|error' "$WORK/w0.log" | head -3)"; }

P=$(port)
rank 0 "$P" "$WORK/i0.log" DSCPP_INSECURE_STORE=1
r0=$!
rank 1 "$P" "$WORK/i1.log" DSCPP_INSECURE_STORE=1
r1=$!
wait $r1 && wait $r0 && pass "DSCPP_INSECURE_STORE=1: 2 ranks without a secret train" ||
  fail "insecure store: $(tail -2 "$WORK/i0.log" "$WORK/i1.log")"
for r in 0 1; do
  grep -q "rank $r: DSCPP_INSECURE_STORE=1: the rendezvous store at 127.0.0.1:$P runs WITHOUT a job secret" \
    "$WORK/i$r.log" || fail "insecure store: rank $r logged no warning"
done

# ---- 5. two hosts over ssh --------------------------------------------------------------------
if [ "$(id -u)" != 0 ] || ! ip netns list > /dev/null 2>&1 || ! [ -x /usr/sbin/sshd ]; then
  echo "skip: two hosts over ssh (needs root, ip netns and sshd)"
  exit $FAILED
fi
(
  FAILED=0
  T=$SRC/tests/testbed/netns-hosts.sh
  . "$(dirname "$0")/netns_testbed.sh"  # its EXIT trap takes the hosts down with this subshell
  testbed_up dsa 10.251 2
  read -r IP1 IP2 <<<"$TESTBED_IPS"
  H=$W/home && mkdir -p "$H/.ssh" && cp "$TESTBED_KEY" "$H/.ssh/id_ed25519" &&
    cp "$TESTBED_KNOWN_HOSTS" "$H/.ssh/known_hosts"
  printf 'node1 slots=1\nnode2 slots=1\n' > "$W/hosts"
  P=$(port)
  "$T" exec node1 env HOME="$H" "$DSCPP" --hostfile "$W/hosts" --master_port "$P" "$GPT" \
    --deepspeed_config "$WORK/c.json" --steps 600 --no_eval --save_dir "$WORK/ssh" "${MODEL[@]}" > "$WORK/ssh.log" 2>&1 &
  job=$!
  if wait_training "$WORK/ssh.log"; then
    pids=$(rank_pids "$WORK/ssh")
    s0=$(secret_of "$(echo "$pids" | head -1)") s1=$(secret_of "$(echo "$pids" | tail -1)")
    [ "$(echo "$pids" | wc -w)" = 2 ] && [ ${#s0} = 64 ] && [ "$s0" = "$s1" ] &&
      pass "ssh: both hosts' ranks got the secret over the SSH channel" ||
      fail "ssh: ranks $pids, secrets of ${#s0} and ${#s1} characters"
    pattern "$s0"
    check_cmdlines "ssh run (sshd's shells and the node agents included)"
    "$T" exec node1 ss -Htln "sport = :$P" > "$WORK/ssh_listen.txt" 2>&1
    grep -q "$IP1:$P" "$WORK/ssh_listen.txt" && pass "ssh: the store listens on node1's address $IP1 only" ||
      fail "ssh: the store's listening socket: $(cat "$WORK/ssh_listen.txt")"
    DSCPP_JOB_SECRET=$s0 "$PROBE" "$IP1" "$P" attack > "$WORK/ssh_attack.txt" 2>&1 &&
      pass "ssh: attacks from outside the hosts refused ($(grep -c '^refused' "$WORK/ssh_attack.txt") of 3)" ||
      fail "ssh: attacks: $(cat "$WORK/ssh_attack.txt")"
  else
    fail "ssh: training never started: $(tail -5 "$WORK/ssh.log")"
  fi
  wait "$job" && grep -q "step 600/600" "$WORK/ssh.log" && pass "ssh: the 2-host run trained to the end" ||
    fail "ssh: the run failed: $(tail -5 "$WORK/ssh.log")"
  check_files "ssh run" "$WORK/ssh.log" "$WORK/ssh"
  exit $FAILED
) || FAILED=1
exit $FAILED
