#!/usr/bin/env bash
# The main job: set-up, build, then every experiment on all six default systems
# with the quick profile (local 3-node clusters; about 20 minutes on a
# 2-core machine). It ends with the headline table and the report's path.
#
#   scripts/quickstart.sh                 # results/<time>-quick
#   scripts/quickstart.sh -out DIR -force # any `nezha experiment run` flag
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
source scripts/setup.sh
exec bin/nezha experiment run all -profile quick "$@"
