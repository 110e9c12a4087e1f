package kvpb

// DiskHealthService is the service name under which a node reports on the
// standard gRPC health service (grpc.health.v1.Health, on its client and
// internal addresses) whether its disk accepts client writes: SERVING
// while it does, NOT_SERVING while the node refuses them for its disk
// (StatusResponse.disk_refusal says why). A leader asks its voters before
// it hands them its leadership for its own disk.
const DiskHealthService = "nezha.disk"
