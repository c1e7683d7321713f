#!/bin/sh
# routefit container entrypoint.
#   no arguments, or only options ("-..."): `routefit serve` configured from the environment,
#     with those options appended (e.g. --access-log);
#   anything else: run that command instead (e.g. `routefit price FILE --config ...`, `sh`).
set -eu

if [ "$#" -eq 0 ] || [ "${1#-}" != "$1" ]; then
    set -- routefit serve \
        --config "${ROUTEFIT_CONFIG:-/etc/routefit/routefit.yaml}" \
        --host "${ROUTEFIT_HOST:-0.0.0.0}" \
        --port "${ROUTEFIT_PORT:-4000}" \
        --workers "${ROUTEFIT_WORKERS:-2}" \
        --log-level "${ROUTEFIT_LOG_LEVEL:-info}" \
        "$@"
fi
exec "$@"
