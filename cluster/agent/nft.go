package agent

import (
	"fmt"
	"net/netip"
	"os"

	"github.com/google/nftables"
	"github.com/google/nftables/binaryutil"
	"github.com/google/nftables/expr"
	"golang.org/x/sys/unix"
)

// packetFilter cuts links in the packet filter of the agent's network
// namespace (nftables): one table of the agent's own holding an output
// chain with a drop rule per cut peer address. Unlike a disabled proxy it
// also cuts a node that dials its peers directly (etcd), and the
// connections a node already has.
type packetFilter struct {
	conn  *nftables.Conn
	table *nftables.Table
	chain *nftables.Chain
}

// filterTable is the agent's nftables table (family inet).
const filterTable = "nezha_agent"

// newPacketFilter creates the table name, replacing one of that name an
// agent that died left behind.
func newPacketFilter(name string) (*packetFilter, error) {
	c, err := nftables.New()
	if err != nil {
		return nil, fmt.Errorf("nftables: %w", err)
	}
	t := &nftables.Table{Name: name, Family: nftables.TableFamilyINet}
	// Adding a table that exists changes nothing: after this pair it is gone.
	c.AddTable(t)
	c.DelTable(t)
	if err := c.Flush(); err != nil {
		return nil, fmt.Errorf("nftables: remove a stale table %s: %w", name, err)
	}
	f := &packetFilter{conn: c, table: c.AddTable(t)}
	accept := nftables.ChainPolicyAccept
	f.chain = c.AddChain(&nftables.Chain{Name: "output", Table: f.table, Type: nftables.ChainTypeFilter,
		Hooknum: nftables.ChainHookOutput, Priority: nftables.ChainPriorityFilter, Policy: &accept})
	if err := c.Flush(); err != nil {
		return nil, fmt.Errorf("nftables: create table %s: %w", name, err)
	}
	return f, nil
}

// drop replaces the rules: the TCP packets this namespace sends to each of
// dests are dropped, and no other.
func (f *packetFilter) drop(dests []netip.AddrPort) error {
	f.conn.FlushChain(f.chain)
	for _, d := range dests {
		f.conn.AddRule(&nftables.Rule{Table: f.table, Chain: f.chain, Exprs: dropTCPTo(d)})
	}
	if err := f.conn.Flush(); err != nil {
		return fmt.Errorf("nftables: %w", err)
	}
	return nil
}

// close deletes the table.
func (f *packetFilter) close() error {
	f.conn.DelTable(f.table)
	if err := f.conn.Flush(); err != nil {
		return fmt.Errorf("nftables: delete table %s: %w", f.table.Name, err)
	}
	return nil
}

// dropTCPTo is the rule `meta nfproto ipv4 meta l4proto tcp ip daddr A tcp
// dport P drop` (ipv6 and ip6 daddr for an IPv6 address).
func dropTCPTo(d netip.AddrPort) []expr.Any {
	addr := d.Addr().Unmap()
	proto, off := byte(unix.NFPROTO_IPV4), uint32(16) // IPv4 header: daddr at 16
	if addr.Is6() {
		proto, off = unix.NFPROTO_IPV6, 24 // IPv6 header: daddr at 24
	}
	raw := addr.AsSlice()
	return []expr.Any{
		&expr.Meta{Key: expr.MetaKeyNFPROTO, Register: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{proto}},
		&expr.Meta{Key: expr.MetaKeyL4PROTO, Register: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{unix.IPPROTO_TCP}},
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: off, Len: uint32(len(raw))},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: raw},
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseTransportHeader, Offset: 2, Len: 2}, // TCP destination port
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: binaryutil.BigEndian.PutUint16(d.Port())},
		&expr.Verdict{Kind: expr.VerdictDrop},
	}
}

// probePacketFilter checks that this namespace's packet filter can be
// changed: it creates and deletes a table of its own.
func probePacketFilter() error {
	f, err := newPacketFilter(fmt.Sprintf("%s_probe_%d", filterTable, os.Getpid()))
	if err != nil {
		return err
	}
	return f.close()
}
