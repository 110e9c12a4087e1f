package linearizability

import (
	"fmt"
	"hash/fnv"
	"sort"
	"strings"

	"github.com/anishathalye/porcupine"
)

// Operation kinds.
const (
	OpPut    = "put"
	OpGet    = "get"
	OpDelete = "delete"
	OpScan   = "scan"
)

// Input is the input of one operation of the model.
type Input struct {
	Kind string `json:"kind"`
	// Key of put, get and delete; the start of a scan.
	Key string `json:"key"`
	// Value of a put, as the model sees it (see ModelValue).
	Value string `json:"value,omitempty"`
	// End of a scan, exclusive; "" means no upper bound.
	End string `json:"end,omitempty"`
	// Limit of a scan; 0 means none.
	Limit int `json:"limit,omitempty"`
}

// KV is one pair of a scan result, with the value as the model sees it.
type KV struct {
	Key   string `json:"key"`
	Value string `json:"value"`
}

// Output is what an operation returned.
type Output struct {
	// Unknown marks a write whose outcome is unknown (ambiguous); its
	// Return is math.MaxInt64.
	Unknown bool `json:"unknown,omitempty"`
	// Found and Value of a get.
	Found bool   `json:"found,omitempty"`
	Value string `json:"value,omitempty"`
	// KVs of a scan, in key order.
	KVs []KV `json:"kvs,omitempty"`
}

// The model's state is a map from key to value, encoded canonically as a
// string (pairs in key order, NUL-separated) so that states are comparable
// with == and hash cheaply: porcupine's default Equal panics on maps.
// Keys and values of the model never contain NUL (values of any size are
// replaced by a printable hash, see ModelValue).

func decodeState(s string) []KV {
	if s == "" {
		return nil
	}
	parts := strings.Split(s, "\x00")
	out := make([]KV, 0, len(parts)/2)
	for i := 0; i+1 < len(parts); i += 2 {
		out = append(out, KV{Key: parts[i], Value: parts[i+1]})
	}
	return out
}

func encodeState(kvs []KV) string {
	var b strings.Builder
	for _, kv := range kvs {
		b.WriteString(kv.Key)
		b.WriteByte(0)
		b.WriteString(kv.Value)
		b.WriteByte(0)
	}
	return b.String()
}

func stateGet(kvs []KV, key string) (string, bool) {
	i := sort.Search(len(kvs), func(i int) bool { return kvs[i].Key >= key })
	if i < len(kvs) && kvs[i].Key == key {
		return kvs[i].Value, true
	}
	return "", false
}

func statePut(kvs []KV, key, value string) []KV {
	i := sort.Search(len(kvs), func(i int) bool { return kvs[i].Key >= key })
	out := make([]KV, 0, len(kvs)+1)
	out = append(out, kvs[:i]...)
	out = append(out, KV{Key: key, Value: value})
	if i < len(kvs) && kvs[i].Key == key {
		i++
	}
	return append(out, kvs[i:]...)
}

func stateDelete(kvs []KV, key string) []KV {
	i := sort.Search(len(kvs), func(i int) bool { return kvs[i].Key >= key })
	if i == len(kvs) || kvs[i].Key != key {
		return kvs
	}
	out := make([]KV, 0, len(kvs)-1)
	out = append(out, kvs[:i]...)
	return append(out, kvs[i+1:]...)
}

func inRange(key, start, end string) bool {
	return key >= start && (end == "" || key < end)
}

// scanState is what a scan of [start, end) with limit returns from kvs.
func scanState(kvs []KV, start, end string, limit int) []KV {
	var out []KV
	for _, kv := range kvs {
		if inRange(kv.Key, start, end) {
			out = append(out, kv)
			if limit > 0 && len(out) >= limit {
				break
			}
		}
	}
	return out
}

func sameKVs(a, b []KV) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// step is the sequential specification of the store.
func step(state, input, output interface{}) (bool, interface{}) {
	s := state.(string)
	in := input.(Input)
	out := output.(Output)
	switch in.Kind {
	case OpPut:
		return true, encodeState(statePut(decodeState(s), in.Key, in.Value))
	case OpDelete:
		return true, encodeState(stateDelete(decodeState(s), in.Key))
	case OpGet:
		v, found := stateGet(decodeState(s), in.Key)
		return found == out.Found && (!found || v == out.Value), s
	case OpScan:
		return sameKVs(scanState(decodeState(s), in.Key, in.End, in.Limit), out.KVs), s
	}
	return false, s
}

// keysOf returns the keys of universe an operation touches: its key, or,
// for a scan, every key of universe in its range.
func keysOf(in Input, universe []string) []string {
	if in.Kind != OpScan {
		return []string{in.Key}
	}
	var out []string
	for _, k := range universe {
		if inRange(k, in.Key, in.End) {
			out = append(out, k)
		}
	}
	return out
}

// Partition splits a history into independent parts: the connected
// components of "touches the same key", where a scan touches every key of
// universe in its range. Put, get and delete on different keys are
// independent (P-compositionality); a scan ties the keys it covers
// together, so that the atomicity of its snapshot is checked. A scan
// that covers no key of universe is checked with the keys its result
// names (normally none; if a scan returns a key that was never written,
// that key's part of the history makes it illegal).
func Partition(universe []string) func([]porcupine.Operation) [][]porcupine.Operation {
	return func(history []porcupine.Operation) [][]porcupine.Operation {
		parent := map[string]string{}
		var find func(string) string
		find = func(k string) string {
			p, ok := parent[k]
			if !ok {
				parent[k] = k
				return k
			}
			if p == k {
				return k
			}
			r := find(p)
			parent[k] = r
			return r
		}
		union := func(a, b string) {
			ra, rb := find(a), find(b)
			if ra != rb {
				if ra < rb {
					parent[rb] = ra
				} else {
					parent[ra] = rb
				}
			}
		}
		touched := make([][]string, len(history))
		for i, op := range history {
			in := op.Input.(Input)
			ks := keysOf(in, universe)
			if out, ok := op.Output.(Output); ok {
				for _, kv := range out.KVs {
					ks = append(ks, kv.Key)
				}
			}
			if len(ks) == 0 {
				// A scan of an empty range: it still belongs somewhere;
				// give it its own part keyed by its range.
				ks = []string{"\x01scan[" + in.Key + "," + in.End + ")"}
			}
			touched[i] = ks
			for _, k := range ks[1:] {
				union(ks[0], k)
			}
			find(ks[0])
		}
		index := map[string]int{}
		var out [][]porcupine.Operation
		for i, op := range history {
			r := find(touched[i][0])
			j, ok := index[r]
			if !ok {
				j = len(out)
				index[r] = j
				out = append(out, nil)
			}
			out[j] = append(out[j], op)
		}
		return out
	}
}

// NewModel returns the Porcupine model of the store: a map from key to
// value with put, get, delete and scan, partitioned by key (scans tie
// together the keys of universe they cover; see Partition). Universe is
// the key space of the workload.
func NewModel(universe []string) porcupine.Model {
	u := append([]string(nil), universe...)
	sort.Strings(u)
	return porcupine.Model{
		Partition: Partition(u),
		Init:      func() interface{} { return "" },
		Step:      step,
		Equal:     func(a, b interface{}) bool { return a.(string) == b.(string) },
		Hash: func(s interface{}) uint64 {
			h := fnv.New64a()
			h.Write([]byte(s.(string)))
			return h.Sum64()
		},
		DescribeOperation: DescribeOperation,
		DescribeState: func(s interface{}) string {
			kvs := decodeState(s.(string))
			parts := make([]string, len(kvs))
			for i, kv := range kvs {
				parts[i] = kv.Key + "=" + kv.Value
			}
			return "{" + strings.Join(parts, ", ") + "}"
		},
		DescribeOperationMetadata: func(m interface{}) string {
			if m == nil {
				return ""
			}
			return fmt.Sprint(m)
		},
	}
}

// DescribeOperation renders one operation for the visualization, e.g.
// "get(k03) -> w2-17" or "put(k03, w2-17) -> ?".
func DescribeOperation(input, output interface{}) string {
	in := input.(Input)
	out, _ := output.(Output)
	switch in.Kind {
	case OpPut:
		if out.Unknown {
			return fmt.Sprintf("put(%s, %s) -> ? (unknown)", in.Key, in.Value)
		}
		return fmt.Sprintf("put(%s, %s)", in.Key, in.Value)
	case OpDelete:
		if out.Unknown {
			return fmt.Sprintf("delete(%s) -> ? (unknown)", in.Key)
		}
		return fmt.Sprintf("delete(%s)", in.Key)
	case OpGet:
		if !out.Found {
			return fmt.Sprintf("get(%s) -> not found", in.Key)
		}
		return fmt.Sprintf("get(%s) -> %s", in.Key, out.Value)
	case OpScan:
		parts := make([]string, len(out.KVs))
		for i, kv := range out.KVs {
			parts[i] = kv.Key + "=" + kv.Value
		}
		// Ranges end exclusively; an end of key+"\x00" is shown as an
		// inclusive end at key.
		rng := fmt.Sprintf("[%s, %s)", in.Key, in.End)
		switch {
		case in.End == "":
			rng = fmt.Sprintf("[%s, +inf)", in.Key)
		case strings.HasSuffix(in.End, "\x00"):
			rng = fmt.Sprintf("[%s, %s]", in.Key, strings.TrimSuffix(in.End, "\x00"))
		}
		lim := ""
		if in.Limit > 0 {
			lim = fmt.Sprintf(" limit %d", in.Limit)
		}
		return fmt.Sprintf("scan%s%s -> {%s}", rng, lim, strings.Join(parts, ", "))
	}
	return fmt.Sprintf("%v -> %v", in, out)
}
