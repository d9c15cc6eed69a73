# Sourced by system tests: port prints a TCP port on 127.0.0.1 that nothing listens on right now
# (random, so concurrent test runs rarely meet; a listener answers a connect). The ports lie
# below the kernel's ephemeral range: a port from inside it can be taken, between this check
# and the bind, as the local end of some other test's outgoing connection ("address in use").
port() {
  local p i low
  low=$(cut -f1 /proc/sys/net/ipv4/ip_local_port_range 2> /dev/null || echo 32768)
  [ "$low" -gt 21024 ] 2> /dev/null || low=32768
  for i in 1 2 3 4 5 6 7 8 9 10; do
    p=$((20000 + RANDOM % (low - 20000)))
    (exec 3<> "/dev/tcp/127.0.0.1/$p") 2> /dev/null || { echo "$p"; return; }
  done
  echo "$p"
}
