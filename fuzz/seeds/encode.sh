#!/usr/bin/env bash
# Regenerates fuzz/corpus/agent_request/ from the text-format seeds here:
# each seeds/agent_request/NAME.txtpb becomes corpus/agent_request/NAME.bin,
# a protobuf-encoded rdma_agent.v1.WorkloadParams. Needs protoc.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
out="$here/../corpus/agent_request"
mkdir -p "$out"
for seed in "$here"/agent_request/*.txtpb; do
    protoc --proto_path="$repo/proto" --encode=rdma_agent.v1.WorkloadParams \
        rdma_agent/v1/agent.proto <"$seed" >"$out/$(basename "$seed" .txtpb).bin"
done
# The capability blob decoder sees the same bytes: one valid RDAB blob (v1,
# rkey 0x1234, addr 0x7f00deadb000, len 4096) with padding.
printf 'RDAB\x01\x00\x00\x00\x34\x12\x00\x00\x00\x00\x00\x00\x00\xb0\xad\xde\x00\x7f\x00\x00\x00\x10\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00' >"$out/rdab-blob.bin"
