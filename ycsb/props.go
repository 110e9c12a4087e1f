package ycsb

import (
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"os"
	"path"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/magiconair/properties"
	"github.com/nezha-harness/nezha/internal/cmdline"
	"github.com/pingcap/go-ycsb/pkg/prop"
)

// shipped holds the upstream YCSB property files workloada..workloadf.
//
//go:embed workloads/workload?
var shipped embed.FS

// ShippedNames lists the shipped property files (workloada..workloadf).
func ShippedNames() []string {
	ents, _ := fs.ReadDir(shipped, "workloads")
	var out []string
	for _, e := range ents {
		out = append(out, e.Name())
	}
	return out
}

// ReadPropertyFile returns the content of a -P argument and where it came
// from. A path that exists is read from disk. Otherwise a name whose last
// element is a shipped file (workloada..workloadf) and whose directory is
// empty or ends in "workloads" (workloada, workloads/workloada,
// ycsb/workloads/workloada) is the shipped copy, so that go-ycsb's
// `-P workloads/workloada` works from any directory.
func ReadPropertyFile(name string) ([]byte, string, error) {
	if b, err := os.ReadFile(name); err == nil {
		return b, name, nil
	} else if !errors.Is(err, os.ErrNotExist) {
		return nil, "", cmdline.Usagef("-P %s: %v", name, err)
	}
	dir, base := filepath.Split(filepath.ToSlash(name))
	dir = strings.TrimSuffix(dir, "/")
	if dir == "" || dir == "workloads" || strings.HasSuffix(dir, "/workloads") {
		if b, err := shipped.ReadFile(path.Join("workloads", base)); err == nil {
			return b, "shipped " + path.Join("ycsb/workloads", base), nil
		}
	}
	return nil, "", cmdline.Usagef("-P %s: no such file (shipped: %s)", name, strings.Join(ShippedNames(), ", "))
}

// LoadProperties merges the -P files in order, then the -p key=value
// settings, and returns the properties and the sources of the files.
func LoadProperties(files, settings []string) (*properties.Properties, []string, error) {
	p := properties.NewProperties()
	var sources []string
	var errs []error
	for _, f := range files {
		b, src, err := ReadPropertyFile(f)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if err := p.Load(b, properties.UTF8); err != nil {
			errs = append(errs, cmdline.Usagef("-P %s: %v", f, err))
			continue
		}
		sources = append(sources, src)
	}
	for _, s := range settings {
		k, v, ok := strings.Cut(s, "=")
		k = strings.TrimSpace(k)
		if !ok || k == "" {
			errs = append(errs, cmdline.Usagef("-p %q: want name=value", s))
			continue
		}
		if _, _, err := p.Set(k, strings.TrimSpace(v)); err != nil {
			errs = append(errs, cmdline.Usagef("-p %q: %v", s, err))
		}
	}
	return p, sources, errors.Join(errs...)
}

// CoreNames are the names accepted for workload=: go-ycsb's and the Java
// class names of upstream YCSB's files (new and old package).
func CoreNames() []string {
	return []string{"core", "site.ycsb.workloads.CoreWorkload", "com.yahoo.ycsb.workloads.CoreWorkload"}
}

// kind of a property's value.
type kind int

const (
	kInt kind = iota
	kFloat
	kBool
	kEnum
	kString
)

type propSpec struct {
	kind kind
	// min for kInt/kFloat (inclusive), max for kFloat proportions.
	min, max float64
	enum     []string
}

func intAtLeast(min float64) propSpec { return propSpec{kind: kInt, min: min, max: math.Inf(1)} }
func proportion() propSpec            { return propSpec{kind: kFloat, min: 0, max: 1} }
func enum(vs ...string) propSpec      { return propSpec{kind: kEnum, enum: vs} }

// knownProperties are the properties this harness reads (through go-ycsb's
// core workload and client) with the values it accepts. Values go-ycsb
// would misread silently (a non-number is taken as the default) or exit on
// are rejected before the run.
func knownProperties() map[string]propSpec {
	return map[string]propSpec{
		prop.Workload:                  enum(CoreNames()...),
		prop.RecordCount:               intAtLeast(1),
		prop.OperationCount:            intAtLeast(1),
		prop.InsertStart:               intAtLeast(0),
		prop.InsertCount:               intAtLeast(1),
		prop.ThreadCount:               intAtLeast(1),
		prop.Target:                    intAtLeast(0),
		prop.MaxExecutiontime:          intAtLeast(0),
		prop.WarmUpTime:                intAtLeast(0),
		prop.BatchSize:                 {kind: kInt, min: 1, max: 1}, // the adapter has no batch operations
		prop.TableName:                 {kind: kString},
		prop.FieldCount:                intAtLeast(1),
		prop.FieldLength:               intAtLeast(1),
		prop.FieldLengthDistribution:   enum("constant", "uniform", "zipfian"),
		prop.ReadAllFields:             {kind: kBool},
		prop.WriteAllFields:            {kind: kBool},
		prop.DataIntegrity:             {kind: kBool},
		prop.ReadProportion:            proportion(),
		prop.UpdateProportion:          proportion(),
		prop.InsertProportion:          proportion(),
		prop.ScanProportion:            proportion(),
		prop.ReadModifyWriteProportion: proportion(),
		prop.RequestDistribution:       enum("uniform", "sequential", "zipfian", "latest", "hotspot", "exponential"),
		prop.ZeroPadding:               {kind: kInt, min: 1, max: 1000},
		prop.MinScanLength:             intAtLeast(1),
		prop.MaxScanLength:             intAtLeast(1),
		prop.ScanLengthDistribution:    enum("uniform", "zipfian"),
		prop.InsertOrder:               enum("hashed", "ordered"),
		prop.HotspotDataFraction:       proportion(),
		prop.HotspotOpnFraction:        proportion(),
		// go-ycsb v1.0.3 retries an insert that succeeded: only 0 is sound.
		prop.InsertionRetryLimit:                          {kind: kInt, min: 0, max: 0},
		prop.InsertionRetryInterval:                       intAtLeast(0),
		prop.ExponentialPercentile:                        {kind: kFloat, min: 0, max: 100},
		prop.ExponentialFrac:                              {kind: kFloat, min: 0, max: math.Inf(1)},
		prop.Silence:                                      {kind: kBool},
		prop.KeyPrefix:                                    {kind: kString},
		prop.LogInterval:                                  intAtLeast(1),
		prop.MeasurementType:                              enum("histogram", "raw", "csv"),
		prop.MeasurementRawOutputFile:                     {kind: kString},
		prop.OutputStyle:                                  enum("plain", "table", "json"),
		prop.MeasurementHistogramPercentileExport:         {kind: kBool},
		prop.MeasurementHistogramPercentileExportFilepath: {kind: kString},
		// Set by the harness or meaningless for it, accepted as is.
		prop.DoTransactions: {kind: kBool},
		prop.Command:        {kind: kString},
		prop.DB:             {kind: kString},
		prop.Label:          {kind: kString},
		prop.Status:         {kind: kString},
		prop.Verbose:        {kind: kBool},
	}
}

func parseBool(v string) (bool, bool) {
	switch strings.ToLower(v) {
	case "1", "true", "yes", "on":
		return true, true
	case "0", "false", "no", "off":
		return false, true
	}
	return false, false
}

// ValidateProperties checks every property the run will use and reports
// every problem at once (as *cmdline.UsageError values). Unknown property
// names are returned as warnings: upstream files may carry settings of
// other bindings. phase is "load" or "run"; maxValueBytes bounds the
// encoded record.
func ValidateProperties(p *properties.Properties, phase string, maxValueBytes int) (warnings []string, err error) {
	var errs []error
	known := knownProperties()
	keys := p.Keys()
	sort.Strings(keys)
	for _, k := range keys {
		v, _ := p.Get(k)
		spec, ok := known[k]
		if !ok {
			warnings = append(warnings, fmt.Sprintf("property %s=%s is not used by this harness", k, v))
			continue
		}
		switch spec.kind {
		case kInt:
			n, perr := strconv.ParseInt(v, 10, 64)
			if perr != nil {
				errs = append(errs, cmdline.Usagef("%s=%q is not an integer", k, v))
			} else if float64(n) < spec.min || float64(n) > spec.max {
				errs = append(errs, cmdline.Usagef("%s=%d is out of range %s", k, n, rangeText(spec)))
			}
		case kFloat:
			f, perr := strconv.ParseFloat(v, 64)
			if perr != nil || math.IsNaN(f) {
				errs = append(errs, cmdline.Usagef("%s=%q is not a number", k, v))
			} else if f < spec.min || f > spec.max {
				errs = append(errs, cmdline.Usagef("%s=%v is out of range [%v, %v]", k, f, spec.min, spec.max))
			}
		case kBool:
			if _, ok := parseBool(v); !ok {
				errs = append(errs, cmdline.Usagef("%s=%q is not a boolean (true or false)", k, v))
			}
		case kEnum:
			if !slices.Contains(spec.enum, v) {
				errs = append(errs, cmdline.Usagef("%s=%q is not one of %s", k, v, strings.Join(spec.enum, ", ")))
			}
		}
	}
	if err := errors.Join(errs...); err != nil {
		return warnings, err // the checks below need parsable values
	}
	// Required counts (go-ycsb takes a missing recordcount as 2^31-1).
	if _, ok := p.Get(prop.RecordCount); !ok {
		errs = append(errs, cmdline.Usagef("recordcount is not set"))
	}
	if _, ok := p.Get(prop.OperationCount); !ok && phase == "run" {
		errs = append(errs, cmdline.Usagef("operationcount is not set"))
	}
	rc := p.GetInt64(prop.RecordCount, 0)
	is := p.GetInt64(prop.InsertStart, 0)
	if ic, ok := p.Get(prop.InsertCount); ok {
		n, _ := strconv.ParseInt(ic, 10, 64)
		if rc > 0 && is+n > rc {
			errs = append(errs, cmdline.Usagef("insertstart %d + insertcount %d is more than recordcount %d", is, n, rc))
		}
	} else if rc > 0 && is >= rc {
		errs = append(errs, cmdline.Usagef("insertstart %d is not below recordcount %d", is, rc))
	}
	if min, max := p.GetInt64(prop.MinScanLength, prop.MinScanLengthDefault), p.GetInt64(prop.MaxScanLength, prop.MaxScanLengthDefault); min > max {
		errs = append(errs, cmdline.Usagef("minscanlength %d is more than maxscanlength %d", min, max))
	}
	if phase == "run" {
		sum := 0.0
		for _, k := range []string{prop.ReadProportion, prop.UpdateProportion, prop.InsertProportion, prop.ScanProportion, prop.ReadModifyWriteProportion} {
			sum += proportionOf(p, k)
		}
		if sum <= 0 {
			errs = append(errs, cmdline.Usagef("the operation proportions add up to 0"))
		}
	}
	if getBool(p, prop.DataIntegrity, false) && p.GetString(prop.FieldLengthDistribution, "constant") != "constant" {
		errs = append(errs, cmdline.Usagef("dataintegrity=true needs fieldlengthdistribution=constant"))
	}
	// go-ycsb exits if a thread would get no operation.
	threads := p.GetInt64(prop.ThreadCount, 1)
	if total := phaseOps(p, phase); total > 0 && threads > total {
		errs = append(errs, cmdline.Usagef("threadcount %d is more than the %d operations of the %s phase", threads, total, phase))
	}
	// The encoded record must fit the servers' value limit.
	fc := p.GetInt64(prop.FieldCount, prop.FieldCountDefault)
	fl := p.GetInt64(prop.FieldLength, prop.FieldLengthDefault)
	if size := MaxRecordBytes(fc, fl); size > int64(maxValueBytes) {
		errs = append(errs, cmdline.Usagef("a record of fieldcount %d x fieldlength %d encodes to %d bytes, over the servers' maximum value size of %d bytes (-maxValueBytes)", fc, fl, size, maxValueBytes))
	}
	return warnings, errors.Join(errs...)
}

func rangeText(s propSpec) string {
	if math.IsInf(s.max, 1) {
		return fmt.Sprintf(">= %v", s.min)
	}
	return fmt.Sprintf("[%v, %v]", s.min, s.max)
}

// proportionOf reads a proportion with go-ycsb's defaults.
func proportionOf(p *properties.Properties, k string) float64 {
	defs := map[string]float64{
		prop.ReadProportion: prop.ReadProportionDefault, prop.UpdateProportion: prop.UpdateProportionDefault,
		prop.InsertProportion: prop.InsertProportionDefault, prop.ScanProportion: prop.ScanProportionDefault,
		prop.ReadModifyWriteProportion: prop.ReadModifyWriteProportionDefault,
	}
	return p.GetFloat64(k, defs[k])
}

func getBool(p *properties.Properties, k string, def bool) bool {
	v, ok := p.Get(k)
	if !ok {
		return def
	}
	b, _ := parseBool(v)
	return b
}

// phaseOps is the number of operations of the phase, as go-ycsb's client
// counts them.
func phaseOps(p *properties.Properties, phase string) int64 {
	if phase == "run" {
		return p.GetInt64(prop.OperationCount, 0)
	}
	if _, ok := p.Get(prop.InsertCount); ok {
		return p.GetInt64(prop.InsertCount, 0)
	}
	return p.GetInt64(prop.RecordCount, 0)
}
