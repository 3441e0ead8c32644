package preflight

import (
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"

	"github.com/gorun/gorun/internal/lazyre"
)

// Topology is a parsed `nvidia-smi topo -m` matrix. Its JSON form is part of
// `gorun preflight --topo-file FILE --json`.
type Topology struct {
	GPUs []TopoGPU `json:"gpus"`
	NICs []TopoNIC `json:"nics"`
	// Matrix[a][b] is the path between devices a and b ("NV18", "PIX",
	// "SYS", ...), for every ordered pair of distinct devices.
	Matrix map[string]map[string]string `json:"matrix"`
	// PCIeOnly is set when the capture's legend lacks the NV# line, as
	// `nvidia-smi topo -mp` prints it: NVLink is then simply not shown.
	PCIeOnly bool `json:"-"`
}

// TopoGPU is one GPU row of the matrix with its affinity columns; a column
// the capture does not have, or "N/A", is "".
type TopoGPU struct {
	Name         string `json:"name"`          // "GPU0"
	CPUAffinity  string `json:"cpu_affinity"`  // cpulist, "0-55,112-167"
	NUMAAffinity string `json:"numa_affinity"` // "0"
}

// TopoNIC is one NIC row of the matrix.
type TopoNIC struct {
	Name   string `json:"name"`   // "NIC0", or the device itself in older captures
	Device string `json:"device"` // "mlx5_0" from the NIC Legend; "" when absent
}

// TopoReport is what the offline topology explainer found in one capture.
type TopoReport struct {
	Source   string    `json:"-"` // the file name, for the text form
	Topology Topology  `json:"topology"`
	Findings []Finding `json:"findings"`
}

// Path types of `nvidia-smi topo -m`, nearest first. NV# (bonded NVLinks)
// is nearer than any PCIe path. SOC is the pre-2017 spelling of SYS.
var pathRank = map[string]int{"PIX": 1, "PXB": 2, "PHB": 3, "NODE": 4, "SYS": 5, "SOC": 5}

var nvlinkToken = lazyre.New(`^NV[0-9]{1,3}$`)

// pathDistance orders path tokens: NV# 0, PIX 1 ... SYS 5; -1 for unknown.
func pathDistance(tok string) int {
	if nvlinkToken().MatchString(tok) {
		return 0
	}
	if r, ok := pathRank[tok]; ok {
		return r
	}
	return -1
}

// Affinity column names as nvidia-smi prints them in the header.
const (
	colCPUAffinity  = "CPU Affinity"
	colNUMAAffinity = "NUMA Affinity"
	colGPUNUMAID    = "GPU NUMA ID"
)

var nicLegendLine = lazyre.New(`^\s*(NIC[0-9]+)\s*:\s*(\S+)\s*$`)

// ParseTopoMatrix reads `nvidia-smi topo -m` output. See ExplainTopology for
// what it accepts and refuses; errors wrap ErrBadCapture.
func ParseTopoMatrix(text []byte) (Topology, error) {
	return parseTopo("nvidia-smi topo -m", text)
}

// parseTopo reads a topology matrix robustly: cells separated by tabs or
// spaces, CRLF or LF, ANSI codes stripped, text before the header (a shell
// prompt, the command) and after the matrix (legend, "[rc=0]") ignored, the
// NIC Legend read when present. Anything that would leave the matrix half
// read is refused, naming line and column.
func parseTopo(name string, text []byte) (Topology, error) {
	lines := captureLines(text)
	var (
		devices  []string       // matrix columns in header order
		devIndex map[string]int // column name → position
		affCols  []string       // trailing affinity columns in header order
		rows     [][]string     // rows[i] = cells of device i, nil until read
		aff      [][]string     // affinity values of device i
		end      = len(lines)   // first line after the matrix
	)
	headerLine := 0
	for i, line := range lines {
		lineNo := i + 1
		fields := fieldsWithColumns(line)
		if devices == nil {
			if len(fields) == 0 || !gpuLabel().MatchString(fields[0].text) {
				continue // prompt, command echo, blank
			}
			if len(fields) > 1 && (fields[1].text == "X" || pathDistance(fields[1].text) >= 0) {
				return Topology{}, badCapture(name, lineNo, fields[0].col, "matrix row %s before any header line", fields[0].text)
			}
			var err error
			devices, affCols, err = parseTopoHeader(name, lineNo, fields)
			if err != nil {
				return Topology{}, err
			}
			devIndex = make(map[string]int, len(devices))
			for j, d := range devices {
				devIndex[d] = j
			}
			rows = make([][]string, len(devices))
			aff = make([][]string, len(devices))
			headerLine = lineNo
			continue
		}
		if len(fields) == 0 || strings.HasPrefix(fields[0].text, "Legend") {
			end = i
			break
		}
		label := fields[0]
		row, ok := devIndex[label.text]
		if !ok {
			return Topology{}, badCapture(name, lineNo, label.col, "row %q is not a column of the header on line %d", label.text, headerLine)
		}
		if rows[row] != nil {
			return Topology{}, badCapture(name, lineNo, label.col, "duplicate row %s", label.text)
		}
		cells := fields[1:]
		extra := len(cells) - len(devices)
		isGPU := gpuLabel().MatchString(label.text)
		// GPU rows carry every affinity column; NIC rows carry none (their
		// cells are blank) or, in some versions, all of them.
		if extra != len(affCols) && (isGPU || extra != 0) {
			want := len(devices) + len(affCols)
			col := cellCountColumn(line, fields, want)
			if extra < 0 {
				col = cellCountColumn(line, fields, len(devices))
			}
			return Topology{}, badCapture(name, lineNo, col, "row %s has %d cells, want %d (%d devices + %d affinity columns)",
				label.text, len(cells), want, len(devices), len(affCols))
		}
		rows[row] = make([]string, len(devices))
		for j, c := range cells[:len(devices)] {
			if j == row {
				if c.text != "X" {
					return Topology{}, badCapture(name, lineNo, c.col, "%s/%s is %q, want X on the diagonal", label.text, devices[j], c.text)
				}
				rows[row][j] = "X"
				continue
			}
			if pathDistance(c.text) < 0 {
				return Topology{}, badCapture(name, lineNo, c.col, "unknown path type %q at %s/%s (want X, NV#, PIX, PXB, PHB, NODE or SYS)", c.text, label.text, devices[j])
			}
			rows[row][j] = c.text
		}
		for _, c := range cells[len(devices):] {
			aff[row] = append(aff[row], c.text)
		}
	}
	if devices == nil {
		return Topology{}, badCapture(name, 1, 0, "no header line naming GPU0 (is this `nvidia-smi topo -m` output?)")
	}
	for j, r := range rows {
		if r == nil {
			return Topology{}, badCapture(name, end+1, 0, "matrix ends without a row for %s", devices[j])
		}
	}

	legend := map[string]string{}
	sawLegend, sawNV := false, false
	for _, line := range lines[end:] {
		if m := nicLegendLine().FindStringSubmatch(line); m != nil {
			legend[m[1]] = m[2]
		}
		t := strings.TrimSpace(line)
		sawLegend = sawLegend || t == "Legend:"
		sawNV = sawNV || strings.HasPrefix(t, "NV#")
	}

	topo := Topology{GPUs: []TopoGPU{}, NICs: []TopoNIC{}, Matrix: map[string]map[string]string{}, PCIeOnly: sawLegend && !sawNV}
	for i, d := range devices {
		if gpuLabel().MatchString(d) {
			g := TopoGPU{Name: d}
			for k, col := range affCols {
				v := aff[i][k]
				if unknownValue(v) {
					v = ""
				}
				switch col {
				case colCPUAffinity:
					g.CPUAffinity = v
				case colNUMAAffinity:
					g.NUMAAffinity = v
				}
			}
			topo.GPUs = append(topo.GPUs, g)
		} else {
			dev, ok := legend[d]
			if !ok && !nicName().MatchString(d) {
				dev = d // older captures name the NIC column by its device
			}
			topo.NICs = append(topo.NICs, TopoNIC{Name: d, Device: dev})
		}
		row := map[string]string{}
		for j, other := range devices {
			if j != i {
				row[other] = rows[i][j]
			}
		}
		topo.Matrix[d] = row
	}
	return topo, nil
}

var nicName = lazyre.New(`^NIC[0-9]+$`)

// parseTopoHeader splits the header into device columns and the trailing
// affinity columns, whose names contain spaces.
func parseTopoHeader(name string, lineNo int, fields []field) (devices, affCols []string, err error) {
	seen := map[string]bool{}
	for k := 0; k < len(fields); k++ {
		f := fields[k]
		rest := make([]string, 0, 3)
		for _, g := range fields[k:min(k+3, len(fields))] {
			rest = append(rest, g.text)
		}
		joined := strings.Join(rest, " ")
		var col string
		switch {
		case strings.HasPrefix(joined, colGPUNUMAID):
			col = colGPUNUMAID
		case strings.HasPrefix(joined, colCPUAffinity):
			col = colCPUAffinity
		case strings.HasPrefix(joined, colNUMAAffinity):
			col = colNUMAAffinity
		}
		if col != "" {
			if seen[col] {
				return nil, nil, badCapture(name, lineNo, f.col, "header names %q twice", col)
			}
			seen[col] = true
			affCols = append(affCols, col)
			k += strings.Count(col, " ")
			continue
		}
		if affCols != nil {
			return nil, nil, badCapture(name, lineNo, f.col, "unknown header column %q after the affinity columns", f.text)
		}
		if !deviceColumn().MatchString(f.text) {
			return nil, nil, badCapture(name, lineNo, f.col, "header cell %q is not a GPU or NIC name", f.text)
		}
		if seen[f.text] {
			return nil, nil, badCapture(name, lineNo, f.col, "header names %s twice", f.text)
		}
		seen[f.text] = true
		devices = append(devices, f.text)
	}
	return devices, affCols, nil
}

// deviceColumn accepts GPU#, NIC# and the RDMA device names older captures
// print in place of NIC# (mlx5_0, mlx5_bond_0, bnxt_re0, irdma0, efa_0 ...).
var deviceColumn = lazyre.New(`^(GPU[0-9]+|NIC[0-9]+|[a-z][a-z0-9_]*[0-9])$`)

// ExplainTopology parses a pasted `nvidia-smi topo -m` (name is the file
// name, for messages) and explains it: GPU pairs that cross sockets or lack
// NVLink when others have it, the nearest NIC of every GPU, how GPUs split
// over NUMA nodes, and an asymmetric matrix. A damaged capture is refused
// with an error wrapping ErrBadCapture rather than half read.
func ExplainTopology(name string, data []byte) (TopoReport, error) {
	topo, err := parseTopo(name, data)
	if err != nil {
		return TopoReport{}, err
	}
	r := TopoReport{Source: name, Topology: topo}
	r.Findings = append(r.Findings, topoAsymmetry(topo)...)
	r.Findings = append(r.Findings, topoGPUPairs(topo)...)
	r.Findings = append(r.Findings, topoNUMA(topo)...)
	r.Findings = append(r.Findings, topoNICs(topo)...)
	if r.Findings == nil {
		r.Findings = []Finding{}
	}
	return r, nil
}

// gpuPair is one unordered GPU pair and the path between them.
type gpuPair struct{ a, b, path string }

func (p gpuPair) String() string { return p.a + "-" + p.b + " " + p.path }

func gpuPairs(t Topology) []gpuPair {
	var ps []gpuPair
	for i, a := range t.GPUs {
		for _, b := range t.GPUs[i+1:] {
			ps = append(ps, gpuPair{a.Name, b.Name, t.Matrix[a.Name][b.Name]})
		}
	}
	return ps
}

func pairList(ps []gpuPair) string {
	s := make([]string, len(ps))
	for i, p := range ps {
		s[i] = p.String()
	}
	return strings.Join(s, ", ")
}

func topoAsymmetry(t Topology) []Finding {
	names := topoDevices(t)
	var bad []string
	for i, a := range names {
		for _, b := range names[i+1:] {
			if ab, ba := t.Matrix[a][b], t.Matrix[b][a]; ab != ba {
				bad = append(bad, fmt.Sprintf("%s→%s %s but %s→%s %s", a, b, ab, b, a, ba))
			}
		}
	}
	if bad == nil {
		return nil
	}
	return []Finding{{
		ID:       "topo.asymmetric",
		Severity: SeverityWarn,
		Message:  "the matrix is not symmetric; nvidia-smi always prints a symmetric one, so this capture was edited or damaged",
		Evidence: strings.Join(bad, "; "),
		Remedy:   "capture it again with `nvidia-smi topo -m > topo.txt` on the node and paste the file unchanged",
	}}
}

func topoGPUPairs(t Topology) []Finding {
	pairs := gpuPairs(t)
	if len(pairs) == 0 {
		return []Finding{{
			ID:       "topo.gpus",
			Severity: SeverityOK,
			Message:  fmt.Sprintf("%d GPU: no GPU pairs to compare", len(t.GPUs)),
			Evidence: "the matrix has one GPU row",
		}}
	}
	var nvlink, pcie, sys []gpuPair
	for _, p := range pairs {
		switch d := pathDistance(p.path); {
		case d == 0:
			nvlink = append(nvlink, p)
		case d >= pathRank["SYS"]:
			sys = append(sys, p)
			pcie = append(pcie, p)
		default:
			pcie = append(pcie, p)
		}
	}
	var out []Finding
	switch {
	case len(pcie) == 0:
		out = append(out, Finding{
			ID:       "topo.nvlink",
			Severity: SeverityOK,
			Message:  fmt.Sprintf("every GPU pair is connected by NVLink (%d pairs)", len(pairs)),
			Evidence: nvlinkSummary(nvlink),
		})
	case len(nvlink) > 0:
		out = append(out, Finding{
			ID:       "topo.nvlink-missing",
			Severity: SeverityWarn,
			Message: fmt.Sprintf("%d of %d GPU pairs have no NVLink while the others do; collectives that span them run at PCIe speed",
				len(pcie), len(pairs)),
			Evidence: pairList(pcie),
			Remedy: "check `nvidia-smi nvlink -s` for links down and the fabric manager on NVSwitch systems; " +
				"if the board has no NVLink between these GPUs, keep tightly coupled ranks on NVLink-connected GPUs",
		})
	case t.PCIeOnly:
		out = append(out, Finding{
			ID:       "topo.pcie-paths",
			Severity: SeverityOK,
			Message:  "this capture shows PCIe paths only (its legend has no NV# entry, as `nvidia-smi topo -mp` prints): NVLink, if any, is not shown",
			Evidence: pairList(pcie),
			Remedy:   "paste `nvidia-smi topo -m` to see NVLink connections",
		})
	default:
		out = append(out, Finding{
			ID:       "topo.pcie-only",
			Severity: SeverityOK,
			Message:  "no NVLink between any GPUs: GPU-to-GPU traffic uses PCIe",
			Evidence: pairList(pcie),
			Remedy:   "expect all-reduce bandwidth bounded by PCIe and the CPU (tens of GB/s, not hundreds)",
		})
	}
	if len(sys) > 0 {
		out = append(out, Finding{
			ID:       "topo.cross-socket",
			Severity: SeverityWarn,
			Message: fmt.Sprintf("%d GPU pairs talk over PCIe across the CPU interconnect (SYS: QPI/UPI between NUMA nodes), the slowest path",
				len(sys)),
			Evidence: pairList(sys),
			Remedy: "place ranks that exchange the most data on GPUs of the same socket, or expect lower bandwidth between these pairs; " +
				"check the P2P matrix (`nvidia-smi topo -p2p r`) for which pairs support peer access",
		})
	}
	return out
}

func nvlinkSummary(ps []gpuPair) string {
	counts := map[string]int{}
	for _, p := range ps {
		counts[p.path]++
	}
	var keys []string
	for k := range counts {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	var s []string
	for _, k := range keys {
		s = append(s, fmt.Sprintf("%s: %d pairs", k, counts[k]))
	}
	return strings.Join(s, ", ")
}

func topoNUMA(t Topology) []Finding {
	groups := map[string][]string{}
	var order []string
	var unknown []string
	for _, g := range t.GPUs {
		if g.NUMAAffinity == "" {
			unknown = append(unknown, g.Name)
			continue
		}
		if _, ok := groups[g.NUMAAffinity]; !ok {
			order = append(order, g.NUMAAffinity)
		}
		groups[g.NUMAAffinity] = append(groups[g.NUMAAffinity], g.Name)
	}
	var out []Finding
	if len(order) > 1 {
		slices.SortFunc(order, func(a, b string) int { return numericCompare(a, b) })
		var ev []string
		for _, n := range order {
			ev = append(ev, fmt.Sprintf("NUMA %s: %s (CPUs %s)", n, strings.Join(groups[n], " "), cpusOf(t, groups[n])))
		}
		out = append(out, Finding{
			ID:       "topo.numa-split",
			Severity: SeverityOK,
			Message:  fmt.Sprintf("GPUs sit on %d NUMA nodes; each rank should run on the CPUs and memory of its GPU's node", len(order)),
			Evidence: strings.Join(ev, "; "),
			Remedy:   "gorun binds each rank to its GPU's CPU affinity; when launching by hand use torchrun --numa-binding=node",
		})
	}
	if len(unknown) > 0 {
		out = append(out, Finding{
			ID:       "topo.numa-unknown",
			Severity: SeverityWarn,
			Message:  "nvidia-smi reports no NUMA affinity for some GPUs, so CPU binding cannot follow the GPU",
			Evidence: strings.Join(unknown, " ") + ": NUMA Affinity N/A or missing",
			Remedy:   "common in VMs without a virtual NUMA topology; bind CPUs by hand if the host has several NUMA nodes",
		})
	}
	return out
}

// cpusOf lists the distinct CPU affinities of the named GPUs.
func cpusOf(t Topology, names []string) string {
	var s []string
	for _, g := range t.GPUs {
		if slices.Contains(names, g.Name) && g.CPUAffinity != "" && !slices.Contains(s, g.CPUAffinity) {
			s = append(s, g.CPUAffinity)
		}
	}
	if s == nil {
		return "unknown"
	}
	return strings.Join(s, " | ")
}

func topoNICs(t Topology) []Finding {
	if len(t.NICs) == 0 || len(t.GPUs) == 0 {
		return nil
	}
	var near, far []string
	for _, g := range t.GPUs {
		names, path, best := nearestNICs(t, g.Name)
		line := fmt.Sprintf("%s → %s (%s)", g.Name, strings.Join(names, ", "), path)
		if best <= pathRank["PXB"] {
			near = append(near, line)
		} else {
			far = append(far, line)
		}
	}
	var out []Finding
	if len(near) > 0 {
		out = append(out, Finding{
			ID:       "topo.nic-nearest",
			Severity: SeverityOK,
			Message:  "nearest NIC of each GPU behind the same PCIe switch (PIX/PXB): GPUDirect RDMA can go straight from GPU to NIC",
			Evidence: strings.Join(near, "; "),
		})
	}
	if len(far) > 0 {
		out = append(out, Finding{
			ID:       "topo.nic-far",
			Severity: SeverityWarn,
			Message: "some GPUs have no NIC behind their PCIe switch; NCCL limits GPUDirect RDMA by GPU-NIC distance " +
				"(NCCL_NET_GDR_LEVEL), so their inter-node traffic may be staged through host memory",
			Evidence: strings.Join(far, "; "),
			Remedy: "expected on hosts with one NIC for many GPUs; otherwise check the slot placement. " +
				"Do not raise NCCL_NET_GDR_LEVEL without measuring: it is a debugging knob",
		})
	}
	return out
}

func nicLabel(n TopoNIC) string {
	if n.Device != "" && n.Device != n.Name {
		return n.Name + " " + n.Device
	}
	return n.Name
}

// topoDevices lists GPUs then NICs in capture order.
func topoDevices(t Topology) []string {
	var s []string
	for _, g := range t.GPUs {
		s = append(s, g.Name)
	}
	for _, n := range t.NICs {
		s = append(s, n.Name)
	}
	return s
}

// numericCompare orders "2" before "10", falling back to string order.
func numericCompare(a, b string) int {
	x, err1 := strconv.Atoi(a)
	y, err2 := strconv.Atoi(b)
	if err1 == nil && err2 == nil {
		return x - y
	}
	return strings.Compare(a, b)
}

// WriteText renders the report for a terminal: the matrix, a GPU table with
// affinities and nearest NIC, then the findings.
func (r TopoReport) WriteText(w io.Writer) {
	t := r.Topology
	src := r.Source
	if src == "" {
		src = "capture"
	}
	fmt.Fprintf(w, "Topology of %s: %s, %s\n\n", src, plural(len(t.GPUs), "GPU"), plural(len(t.NICs), "NIC"))

	names := topoDevices(t)
	width := 5
	for _, n := range names {
		width = max(width, len(n)+1)
	}
	for _, n := range names {
		for _, m := range t.Matrix[n] {
			width = max(width, len(m)+1)
		}
	}
	header := fmt.Sprintf("%-*s", width, "")
	for _, n := range names {
		header += fmt.Sprintf("%-*s", width, n)
	}
	fmt.Fprintln(w, strings.TrimRight(header, " "))
	for _, a := range names {
		line := fmt.Sprintf("%-*s", width, a)
		for _, b := range names {
			cell := t.Matrix[a][b]
			if a == b {
				cell = "X"
			}
			line += fmt.Sprintf("%-*s", width, cell)
		}
		fmt.Fprintln(w, strings.TrimRight(line, " "))
	}

	if len(t.GPUs) > 0 {
		fmt.Fprintln(w)
		fmt.Fprintf(w, "%-6s %-20s %-5s %s\n", "GPU", "CPU affinity", "NUMA", "nearest NIC")
		for _, g := range t.GPUs {
			fmt.Fprintln(w, strings.TrimRight(fmt.Sprintf("%-6s %-20s %-5s %s", g.Name, orDash(g.CPUAffinity), orDash(g.NUMAAffinity), nearestNIC(t, g.Name)), " "))
		}
	}
	var legend []string
	for _, n := range t.NICs {
		if n.Device != n.Name {
			legend = append(legend, fmt.Sprintf("%s = %s", n.Name, orDash(n.Device)))
		}
	}
	if legend != nil {
		fmt.Fprintf(w, "\n%s\n", strings.Join(legend, "\n"))
	}

	fmt.Fprintln(w)
	fmt.Fprintln(w, "Findings:")
	if len(r.Findings) == 0 {
		fmt.Fprintln(w, "  none")
	}
	for _, f := range r.Findings {
		fmt.Fprintf(w, "  [%s] %s: %s\n", f.Severity, f.ID, f.Message)
		if f.Evidence != "" {
			fmt.Fprintf(w, "      evidence: %s\n", f.Evidence)
		}
		if f.Remedy != "" {
			fmt.Fprintf(w, "      remedy:   %s\n", f.Remedy)
		}
	}
}

func plural(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// nearestNIC names the nearest NIC(s) of a GPU and the path, "-" when none.
func nearestNIC(t Topology, gpu string) string {
	names, path, _ := nearestNICs(t, gpu)
	if names == nil {
		return "-"
	}
	return strings.Join(names, ", ") + " (" + path + ")"
}

// nearestNICs returns the NICs at the shortest path from gpu (PIX < PXB <
// PHB < NODE < SYS), that path and its distance.
func nearestNICs(t Topology, gpu string) (names []string, path string, dist int) {
	dist = -1
	for _, n := range t.NICs {
		p := t.Matrix[gpu][n.Name]
		d := pathDistance(p)
		switch {
		case dist < 0 || d < dist:
			dist, names, path = d, []string{nicLabel(n)}, p
		case d == dist:
			names = append(names, nicLabel(n))
		}
	}
	return names, path, dist
}
