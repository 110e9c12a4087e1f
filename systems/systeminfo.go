package systems

// SystemInfo is one row of `nezha systems -json`: a registered system's
// name, role, summary and conformance configurations.
type SystemInfo struct {
	Name        string        `json:"name"`
	Role        Role          `json:"role"`
	Reference   bool          `json:"reference,omitempty"`
	Optional    bool          `json:"optional,omitempty"`
	Summary     string        `json:"summary"`
	Conformance []Conformance `json:"conformance"`
}

// Infos describes the registered systems in registration order (what
// `nezha systems` prints).
func (r *Registry) Infos() []SystemInfo {
	var infos []SystemInfo
	for _, s := range r.Systems() {
		infos = append(infos, SystemInfo{Name: s.Name, Role: s.Role, Reference: s.Reference, Optional: s.Optional, Summary: s.Summary, Conformance: s.Conformances()})
	}
	return infos
}
