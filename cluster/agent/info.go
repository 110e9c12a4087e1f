package agent

import (
	"context"
	"fmt"
	"os"
	"runtime"

	"github.com/prometheus/procfs"

	"github.com/nezha-harness/nezha/cluster/agent/agentpb"
	"github.com/nezha-harness/nezha/internal/buildinfo"
	"github.com/nezha-harness/nezha/internal/machine"
)

// Info describes the host and what the agent can do on it, each
// capability probed for real.
func (s *server) Info(context.Context, *agentpb.InfoRequest) (*agentpb.InfoResponse, error) {
	resp := &agentpb.InfoResponse{
		Cpus:        int32(runtime.NumCPU()),
		CpuModel:    machine.CPUModel(),
		Kernel:      machine.Kernel(),
		GoVersion:   runtime.Version(),
		Build:       buildinfo.Read().String(),
		Root:        os.Geteuid() == 0,
		DataDir:     s.dataDir(),
		InContainer: inContainer(),
	}
	resp.Hostname, _ = os.Hostname()
	device, raPath := machine.DataDevice(s.cfg.Dir)
	resp.DataDevice, resp.ReadAheadKb = device, machine.ReadAheadKB(raPath)
	if fs, err := procfs.NewDefaultFS(); err == nil {
		if mi, err := fs.Meminfo(); err == nil && mi.MemTotalBytes != nil {
			resp.MemoryBytes = int64(*mi.MemTotalBytes)
		}
	}
	s.probeMu.Lock()
	defer s.probeMu.Unlock()
	resp.MemoryCgroup = capability(probeMemoryCgroup(s.groupName + "-probe"))
	resp.DropCaches = capability(dropCachesPath, writable(dropCachesPath))
	if raPath == "" {
		resp.ReadAhead = &agentpb.Capability{Why: fmt.Sprintf("no read_ahead_kb in /sys for the device of %s (%q)", s.cfg.Dir, device)}
	} else {
		resp.ReadAhead = capability(raPath, writable(raPath))
	}
	resp.PacketFilter = s.packetFilterCapability()
	return resp, nil
}

// capability is ok with how, or not with err's reason.
func capability(how string, err error) *agentpb.Capability {
	if err != nil {
		return &agentpb.Capability{Why: err.Error()}
	}
	return &agentpb.Capability{Ok: true, Why: how}
}

// probeMemoryCgroup creates and removes the memory cgroup name; how is
// the controller's version.
func probeMemoryCgroup(name string) (how string, err error) {
	l, ok := FindMemoryController()
	if !ok {
		return "", errNoController
	}
	dir, err := NewMemoryGroup(name, 0)
	if dir != "" {
		if rerr := RemoveMemoryGroup(dir); err == nil {
			err = rerr
		}
	}
	return l.Version, err
}

// packetFilterCapability says whether links are cut with nftables too.
func (s *server) packetFilterCapability() *agentpb.Capability {
	s.links.mu.Lock()
	has := s.links.filter != nil
	s.links.mu.Unlock()
	switch {
	case !has && s.cfg.PacketFilter:
		return &agentpb.Capability{Why: s.filterWhy}
	case !has:
		// Not probed: this namespace may be shared (nodes on one loopback),
		// and its packet filter is not the agent's to touch.
		return &agentpb.Capability{Why: "off (the agent runs without a packet filter: Config.PacketFilter, -packetFilter)"}
	}
	return capability("nftables table "+filterTable, probePacketFilter())
}
