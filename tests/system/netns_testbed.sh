# Sourced by the ssh system tests: brings up N sshd hosts in network namespaces with the
# testbed script $T (tests/testbed/netns-hosts.sh) under a name, state directory and subnet
# of this run, and takes them down on exit.
#   testbed_up NAME_PREFIX SUBNET_PREFIX N     e.g. testbed_up dsl 10.252 3
# Sets W (a scratch directory, removed on exit) and the TESTBED_* variables of `netns-hosts.sh env`.
# A subnet already in use on this machine is skipped (up to 5 tries); any other failure ends
# the test with its log.
testbed_up() {
  local prefix=$1 net=$2 n=$3 try up=0
  export TESTBED_NAME="$prefix$(($$ % 1000000))" TESTBED_DIR="/tmp/$prefix-tb-$$"
  W=$(mktemp -d "/tmp/$prefix-ssh.XXXXXX")
  trap '"$T" down >/dev/null 2>&1; rm -rf "$W"' EXIT
  trap 'exit 1' INT TERM
  for try in 0 1 2 3 4; do
    export TESTBED_NET="$net.$(( ($$ + try * 37) % 250 + 1 ))"
    if "$T" up "$n" >"$W/up.log" 2>&1; then up=1; break; fi
    grep -q "already in use" "$W/up.log" || break
  done
  [ $up = 1 ] || { cat "$W/up.log"; echo "FAIL: testbed did not come up"; exit 1; }
  eval "$("$T" env)"
  echo "testbed $TESTBED_NAME: $TESTBED_IPS"
}
