#!/usr/bin/env bash
# `dscpp` launch options as users type them, checked through --dry_run (nothing starts):
# the plan from a hostfile with --include/--exclude, the exact agent commands and the
# environment each rank gets, and the errors for bad input.
#   launch_cli.sh DSCPP
set -u
dscpp=$(readlink -f "$1")
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
cd "$tmp" || exit 1
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
expect() {  # expect FILE PATTERN WHAT
  grep -qE -- "$2" "$1" || fail "$3: no line matching /$2/ in:"$'\n'"$(cat "$1")"
}

printf '# two workers\nworker-0 slots=4\nworker-1 slots=4   # trailing text is ignored\n' >hf
printf '# comments and quoting are allowed here, unlike DeepSpeed\nexport NCCL_DEBUG=INFO\nWANDB_PROJECT="my run"\n' >.deepspeed_env

"$dscpp" --dry_run --master_addr 10.1.2.3 -H hf -i 'worker-0@worker-1:1,3' --env EXTRA=1 -- /bin/echo hi >out 2>err ||
  fail "dry run failed: $(cat err)"
expect err '^dscpp plan: 6 ranks on 2 hosts from hostfile hf; runner ssh; master 10.1.2.3:29500$' "plan header"
expect err '^  worker-0 +4 ranks \(0-3\) +on slots 0-3$' "worker-0 row"
expect err '^  worker-1 +2 ranks \(4-5\) +on slots 1,3$' "worker-1 row (the documented --include semantics)"
# the job's secret read from the channel's stdin, the pre-flight check, the wait for the
# launcher's go, then the agent
expect out "^command on worker-1: IFS= read -r DSCPP_JOB_SECRET \|\| exit 0; export DSCPP_JOB_SECRET; \(f=$dscpp; .*; IFS= read -r go && .*; cd .* && exec $dscpp node-agent .*--node_rank=1 .*-- /bin/echo hi$" "agent command"
expect out "^  DSCPP_JOB_SECRET=\(not shown: made for this launch\)$" "the secret, named but not shown"
expect out "^  NCCL_DEBUG=INFO$" "env file forwarded"
expect out "^  WANDB_PROJECT='my run'$" "quoted env file value"
expect out "^  EXTRA=1$" "--env forwarded"
expect out "^  MASTER_ADDR=10.1.2.3$" "MASTER_ADDR"
expect out "^  WORLD_SIZE=6$" "WORLD_SIZE"

"$dscpp" --dry_run -H hf -e worker-0 --master_addr 10.1.2.3 -- /bin/true >out 2>err || fail "exclude: $(cat err)"
expect err '^dscpp plan: 4 ranks on 1 host' "exclude leaves worker-1"

"$dscpp" --dry_run --num_procs 1 -- /bin/true >out 2>err || fail "one rank: $(cat err)"
expect err '^  localhost +1 rank +\(0\) +on slot 0$' "one-rank row (not \"slots 0\")"

"$dscpp" --dry_run --num_procs 3 --launcher openmpi -- hostname >out 2>err || fail "openmpi dry run: $(cat err)"
expect out "^command: mpirun .*-n 3 --host localhost:3 --map-by slot .*rank-shim --local_rank_at=-1 --stop_on_usr1 -- hostname$" "mpirun command"

# Errors a user can act on, each with exit status 1.
check_error() {  # check_error PATTERN ARGS...
  local pattern=$1; shift
  "$dscpp" "$@" >out 2>err; local rc=$?
  [ "$rc" = 1 ] || fail "dscpp $* exited $rc, expected 1"
  expect err "$pattern" "error for: $*"
}
check_error "No slot '7' on host 'worker-1'" --dry_run -H hf -i worker-1:7 -- /bin/true
check_error "worker-2.*did you mean worker-1|worker-2.*worker-0, worker-1" --dry_run -H hf -i worker-2 -- /bin/true
check_error "include.*exclude|exclude.*include" --dry_run -H hf -i worker-0 -e worker-1 -- /bin/true
printf 'worker-0 slots=4\nworker-0 slots=2\n' >dup
check_error "dup:2" --dry_run -H dup -- /bin/true
check_error "cannot|No such file" -H /nonexistent/hostfile -- /bin/true
RANK=1 WORLD_SIZE=2 "$dscpp" --num_procs 2 -- /bin/true >out 2>err; rc=$?
[ "$rc" = 1 ] && grep -q "inside a launched job" err || fail "inside a launched job: exit $rc, $(cat err)"
"$dscpp" >out 2>err; [ $? = 2 ] && grep -q "no PROGRAM" err || fail "no program: $(cat err)"
printf 'worker-0 slots=0\n' >zero
check_error "hostfile zero has no slots \(every host has slots=0\)" --dry_run -H zero -- /bin/true
# A shared library without the .so suffix would only get "Permission denied" from exec.
cp /usr/lib/x86_64-linux-gnu/libm.so.6 plugin && chmod -x plugin
check_error "plugin is a shared library that is not executable: a model plugin\?.*ends in .so" --num_procs 1 ./plugin
# Ranges the command line refuses before planning anything.
for bad in "--num_procs 0" "--num_procs -2" "--master_port 0" "--master_port 70000"; do
  "$dscpp" $bad -- /bin/true >out 2>err && fail "$bad was accepted"
  expect err "${bad%% *}: Value -?[0-9]+ not in range" "$bad refused"
done
# --env takes one value: the program after it stays the program.
"$dscpp" --num_procs 1 --env A=1 /usr/bin/env >out 2>err || fail "--env A=1 PROGRAM: $(cat err)"
expect out "A=1" "--env A=1 directly before the program"

# A busy master port is refused before any rank starts.
exec 9< <(exec python3 -c 'import socket,time; s=socket.socket(); s.bind(("0.0.0.0",0)); s.listen(); print(s.getsockname()[1], flush=True); time.sleep(30)')
holder=$!
read -r port <&9
check_error "port $port is already in use" --num_procs 2 --master_port "$port" -- /bin/true
kill "$holder" 2>/dev/null; exec 9<&-

[ "$failures" = 0 ] && echo "launch_cli: all checks passed"
exit $(( failures > 0 ))
