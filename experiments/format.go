package experiments

import (
	"fmt"
	"strconv"
	"strings"
)

// How numbers, byte sizes and lists print in tables, notes and logs.
// The byte formatters differ on purpose: bytesText renders data sizes
// (MiB and GiB), sizeText value and record sizes (B and KiB); merging
// them would change printed output.

// f0, f1 and f2 render a number with 0, 1 and 2 decimals; ms renders
// microseconds as milliseconds with 2.
func f0(v float64) string { return strconv.FormatFloat(v, 'f', 0, 64) }
func f1(v float64) string { return strconv.FormatFloat(v, 'f', 1, 64) }
func f2(v float64) string { return strconv.FormatFloat(v, 'f', 2, 64) }
func ms(us int64) string  { return strconv.FormatFloat(float64(us)/1000, 'f', 2, 64) }

// floatsText renders values with one decimal, comma-separated.
func floatsText(vs []float64) string {
	parts := make([]string, len(vs))
	for i, v := range vs {
		parts[i] = f1(v)
	}
	return strings.Join(parts, ", ")
}

// bytesText renders a size in binary units: "512 MiB", "1.5 GiB".
func bytesText(b int64) string {
	switch {
	case b >= 10*gib:
		return fmt.Sprintf("%.0f GiB", float64(b)/gib)
	case b >= gib:
		return fmt.Sprintf("%.1f GiB", float64(b)/gib)
	case b >= 10*mib:
		return fmt.Sprintf("%.0f MiB", float64(b)/mib)
	}
	return fmt.Sprintf("%.1f MiB", float64(b)/mib)
}

// cacheText renders a page cache size, "-" when it was not limited.
func cacheText(b int64) string {
	if b < 0 {
		return "-"
	}
	return bytesText(b)
}

// bytesList renders sizes with bytesText, comma-separated.
func bytesList(bs []int64) string {
	var parts []string
	for _, b := range bs {
		parts = append(parts, bytesText(b))
	}
	return strings.Join(parts, ", ")
}

// sizeText renders a value or record size: "4 KiB" for whole KiB,
// "100 B" otherwise.
func sizeText(b float64) string {
	if b >= kib && int64(b)%kib == 0 {
		return fmt.Sprintf("%d KiB", int64(b)/kib)
	}
	return fmt.Sprintf("%.0f B", b)
}

// percentList renders fractions as "50 %, 70 % and 90 %".
func percentList(fs []float64) string {
	var parts []string
	for _, f := range fs {
		parts = append(parts, fmt.Sprintf("%g %%", 100*f))
	}
	if len(parts) < 2 {
		return strings.Join(parts, "")
	}
	return strings.Join(parts[:len(parts)-1], ", ") + " and " + parts[len(parts)-1]
}
