# Sourced by system tests: port prints a TCP port on 127.0.0.1 that nothing listens on right now
# (random in 20000–39999, so concurrent test runs rarely meet; a listener answers a connect).
port() {
  local p i
  for i in 1 2 3 4 5 6 7 8 9 10; do
    p=$((20000 + RANDOM % 20000))
    (exec 3<> "/dev/tcp/127.0.0.1/$p") 2> /dev/null || { echo "$p"; return; }
  done
  echo "$p"
}
