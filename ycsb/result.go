package ycsb

import "github.com/nezha-harness/nezha/workloads"

// Result is what -json FILE and summary.json hold.
type Result struct {
	Summary
	Run workloads.RunInfo `json:"run"`
}
