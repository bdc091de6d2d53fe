# Sourced by the benchmark scripts that run the floor clients
# (scripts/bench-floor.sh, scripts/bench-footprint.sh): builds the
# binaries of the profile ATTEST_BENCH_PROFILE (default `release`) unless
# ATTEST_BENCH_NO_BUILD is set, and names them `bin` (attest), `server`
# (the scripted model server) and `floor` (attest-store's `step_floor`).
profile=${ATTEST_BENCH_PROFILE:-release}
if [[ -z "${ATTEST_BENCH_NO_BUILD:-}" ]]; then
  cargo build --profile "$profile" -p attest-cli --no-default-features --bin attest --example scripted_server >&2
  cargo build --profile "$profile" -p attest-store --example step_floor >&2
fi
bin=target/$profile/attest
server=target/$profile/examples/scripted_server
floor=target/$profile/examples/step_floor
[[ -x $bin && -x $server && -x $floor ]] || { echo "missing $bin, $server or $floor" >&2; exit 1; }
