// Package deploy holds the container deployment of the harness:
// Dockerfile (the image scripts/image.sh builds, FROM scratch) and
// compose.yaml (a cluster of any system, one container per node, for
// docker-compose), described in docs/containers.md. It has no Go code of
// its own; its test builds the image and runs a cluster with Docker.
package deploy
