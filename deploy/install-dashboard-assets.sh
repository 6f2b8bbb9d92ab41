#!/bin/sh
# Installs the dashboard's browser libraries (Chart.js, pinned in package-lock.json)
# from npm into gateway/admin/node_modules, where the gateway serves them from.
# Needs node and npm; nothing is copied into the repository.
set -eu
cd "$(dirname "$0")/../gateway/admin"
npm ci --omit=dev --no-audit --no-fund
