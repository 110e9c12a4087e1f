#!/usr/bin/env bash
# Regenerates the committed gRPC code from api/kvpb/*.proto and
# cluster/agent/agentpb/agent.proto.
# Needs protoc (apt protobuf-compiler 3.21.12), protoc-gen-go v1.36.12 and
# protoc-gen-go-grpc v1.6.2 on PATH.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$PATH:$(go env GOPATH)/bin"
protoc --go_out=. --go_opt=paths=source_relative \
  --go-grpc_out=. --go-grpc_opt=paths=source_relative \
  api/kvpb/kv.proto api/kvpb/diskfaults.proto api/kvpb/admin.proto api/kvpb/span.proto \
  cluster/agent/agentpb/agent.proto
