package preflight

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/gorun/gorun/internal/clockevent"
	"github.com/gorun/gorun/internal/secret"
)

// Severity grades a finding. Order matters: fail is worse than warn is worse
// than ok.
type Severity string

// Severities, best first.
const (
	SeverityOK   Severity = "ok"
	SeverityWarn Severity = "warn"
	SeverityFail Severity = "fail"
)

// rank orders severities for sorting: fail 2, warn 1, ok 0.
func (s Severity) rank() int {
	switch s {
	case SeverityFail:
		return 2
	case SeverityWarn:
		return 1
	}
	return 0
}

// Finding is one check's verdict on a node (or across nodes).
type Finding struct {
	ID       string   `json:"id"`       // stable, dotted: "driver.modules", "gpu.ecc"
	Severity Severity `json:"severity"` // ok, warn or fail
	Message  string   `json:"message"`  // one sentence a user can act on
	Evidence string   `json:"evidence"` // what was seen, quoted from the facts
	Remedy   string   `json:"remedy"`   // what to do; empty when nothing is needed
}

// Want is what the job asks of a node.
type Want struct {
	// NProc is --nproc-per-node as given: "gpu", "cpu", "auto", "xpu", a
	// number, or "" when unknown.
	NProc string
	// GPUsRequested is true when the job needs GPUs (a GPU backend, or
	// NProc "gpu"); a numeric NProc then counts GPUs.
	GPUsRequested bool
	// GPUIDs are the GPU indexes the job will use; nil means 0..n-1.
	GPUIDs []int
}

// gpusWanted reports whether the node must have usable GPUs, and how many
// (0 = at least one, count unknown).
func (w Want) gpusWanted() (bool, int) {
	switch w.NProc {
	case "gpu":
		return true, 0
	case "cpu":
		return false, 0
	}
	if !w.GPUsRequested {
		return false, 0
	}
	n, err := strconv.Atoi(w.NProc)
	if err != nil {
		return true, 0
	}
	return true, n
}

// Check evaluates one node's facts against what the job wants. Every check
// that applies produces a finding, ok ones included, so a report shows
// what was verified.
func Check(f Facts, want Want) []Finding {
	var out []Finding
	add := func(fs ...Finding) { out = append(out, fs...) }
	add(checkCollect(f)...)
	drv, haveGPUs := checkDriver(f, want)
	add(drv...)
	add(checkGPUCount(f, want)...)
	add(checkVisibleDevices(f, want)...)
	add(checkCUDAEnv(f)...)
	add(checkTorch(f)...)
	add(checkScript(f)...)
	if haveGPUs {
		add(checkGPUHealth(f)...)
		add(checkGPUModes(f)...)
		add(checkClocks(f)...)
		add(checkPCIe(f)...)
		add(checkP2P(f)...)
		add(checkTopology(f)...)
		add(checkNVLink(f)...)
		add(checkCUDA(f)...)
	}
	add(checkRDMA(f, haveGPUs)...)
	add(checkLimits(f)...)
	add(checkRoute(f)...)
	add(checkBandwidth(f)...)
	return out
}

func ok(id, msg, evidence string) Finding {
	return Finding{ID: id, Severity: SeverityOK, Message: msg, Evidence: evidence}
}

func checkCollect(f Facts) []Finding {
	var out []Finding
	for _, s := range f.Stalled {
		evidence, remedy := stallAdvice(s.Step)
		out = append(out, Finding{
			ID: "collect.stalled", Severity: SeverityFail,
			Message:  fmt.Sprintf("preflight step %q on %s did not finish within %gs", s.Step, f.Host, s.Seconds),
			Evidence: evidence, Remedy: remedy,
		})
	}
	if len(f.Errors) > 0 {
		out = append(out, Finding{
			ID: "collect.errors", Severity: SeverityWarn,
			Message:  fmt.Sprintf("%d facts could not be collected; checks that need them are skipped", len(f.Errors)),
			Evidence: strings.Join(f.Errors, "; "),
			Remedy:   "run `gorun preflight` as the job's user and check the named files and commands",
		})
	}
	return out
}

// stallAdvice says what a stalled collector step was doing and what to do
// about it.
func stallAdvice(step string) (evidence, remedy string) {
	switch step {
	case "nvml":
		return "an NVML call (device enumeration, P2P, NVLink or health) did not return",
			"a GPU that fell off the bus or a hung driver holds NVML: check `dmesg` for Xid errors and run `nvidia-smi` on the node; reset the GPU or drain the node"
	case "nvidia-smi":
		return "nvidia-smi did not exit",
			"a GPU that fell off the bus or a hung driver holds nvidia-smi: check `dmesg` for Xid errors; reset the GPU or drain the node"
	case "torch":
		return "the Python behind torchrun did not answer the torch probe",
			"run `python -c 'import torch'` with torchrun's interpreter on the node; a stalled network filesystem under the venv or home is the usual cause"
	case "route":
		return "looking up or probing the route to the master address did not finish",
			"check the node's network and the master address (--master-addr)"
	default:
		return "reading the training script did not finish",
			"check the filesystem the training script is on (a stalled network mount)"
	}
}

// checkDriver covers the kernel driver, its modules and NVML. It reports
// whether the node has GPUs the other GPU checks can look at.
func checkDriver(f Facts, want Want) ([]Finding, bool) {
	d := f.Driver
	needGPU, _ := want.gpusWanted()
	noLib := d.NVMLErrorCode == int(nvml.ERROR_LIBRARY_NOT_FOUND) || f.Source == "" && d.NVMLErrorCode == 0
	if !d.Loaded && noLib && len(f.GPUs) == 0 {
		fd := Finding{
			ID:       "driver.present",
			Severity: SeverityOK,
			Message:  "no NVIDIA driver: /proc/driver/nvidia/version missing, NVML library not found; fine for a CPU job",
			Evidence: evidenceNoDriver(d),
		}
		if needGPU {
			fd.Severity = SeverityFail
			fd.Message = "no NVIDIA driver: /proc/driver/nvidia/version missing, NVML library not found, but the job asks for GPUs"
			fd.Remedy = "run on a GPU node, install the NVIDIA driver, or use --nproc-per-node cpu for a CPU job"
		}
		return append([]Finding{fd}, checkNouveau(d)...), false
	}

	var out []Finding
	switch {
	case f.Source == "nvidia-smi":
		cause := d.NVMLError
		if d.NVMLErrorCode != 0 {
			cause, _ = InitCause(d.NVMLErrorCode)
		}
		out = append(out, Finding{
			ID: "driver.nvml", Severity: SeverityWarn,
			Message:  "NVML could not be used by gorun (" + cause + "); facts come from nvidia-smi and are less complete",
			Evidence: fmt.Sprintf("nvmlInit: %s (%d)", d.NVMLError, d.NVMLErrorCode),
			Remedy:   "use a gorun binary built with cgo, or make libnvidia-ml.so.1 loadable (LD_LIBRARY_PATH)",
		})
	case d.NVMLErrorCode != 0:
		cause, remedy := InitCause(d.NVMLErrorCode)
		out = append(out, Finding{
			ID: "driver.nvml", Severity: SeverityFail,
			Message:  "NVML failed to initialise: " + cause,
			Evidence: fmt.Sprintf("nvmlInit: %s (%d)", d.NVMLError, d.NVMLErrorCode),
			Remedy:   remedy,
		})
	case f.Source == "":
		out = append(out, Finding{
			ID: "driver.nvml", Severity: SeverityFail,
			Message:  "no GPU facts: NVML is not available to gorun and nvidia-smi did not answer",
			Evidence: d.NVMLError,
			Remedy:   "check that nvidia-smi works on the node",
		})
	default:
		out = append(out, ok("driver.nvml", "NVML answers", fmt.Sprintf("driver %s, NVML %s, CUDA %s, source %s",
			d.DriverVersion, d.NVMLVersion, cudaString(d.CUDADriverVersion), f.Source)))
	}
	out = append(out, checkModules(f)...)
	out = append(out, checkNouveau(d)...)
	if d.LibraryVersion != "" && d.KernelModuleVersion != "" && d.LibraryVersion != d.KernelModuleVersion {
		out = append(out, Finding{
			ID: "driver.library", Severity: SeverityFail,
			Message:  "libnvidia-ml is from another driver version than the loaded kernel module",
			Evidence: fmt.Sprintf("libnvidia-ml.so.1 → %s, /proc/driver/nvidia/version %s", d.LibraryVersion, d.KernelModuleVersion),
			Remedy:   "a driver upgrade is half done: reboot the node (or reload the nvidia modules with no GPU process running)",
		})
	}
	if d.KernelModuleVersion != "" && d.DriverVersion != "" {
		if d.KernelModuleVersion != d.DriverVersion {
			out = append(out, Finding{
				ID: "driver.version", Severity: SeverityFail,
				Message:  "the loaded kernel module and the user-space driver are different versions",
				Evidence: fmt.Sprintf("/proc/driver/nvidia/version %s, NVML %s", d.KernelModuleVersion, d.DriverVersion),
				Remedy:   "reboot the node, or reload the nvidia modules with no GPU process running",
			})
		} else {
			out = append(out, ok("driver.version", "kernel module and user-space driver match",
				fmt.Sprintf("%s (%s kernel module)", d.KernelModuleVersion, d.Flavor)))
		}
	}
	return out, len(f.GPUs) > 0
}

func evidenceNoDriver(d DriverFacts) string {
	e := "/proc/driver/nvidia/version: missing"
	if d.NVMLError != "" {
		e += "; nvmlInit: " + d.NVMLError
	}
	if len(d.DevNodes) == 0 {
		e += "; no /dev/nvidia*"
	}
	return e
}

func checkNouveau(d DriverFacts) []Finding {
	if !d.Modules["nouveau"] {
		return nil
	}
	return []Finding{{
		ID: "driver.nouveau", Severity: SeverityFail,
		Message:  "the nouveau driver is loaded; it claims NVIDIA GPUs and conflicts with the NVIDIA driver",
		Evidence: "nouveau in /proc/modules",
		Remedy:   "blacklist nouveau (modprobe.d: blacklist nouveau, options nouveau modeset=0), rebuild the initramfs and reboot",
	}}
}

// checkModules: CUDA needs nvidia and nvidia_uvm; nvidia_drm and
// nvidia_modeset serve display only and are not required.
func checkModules(f Facts) []Finding {
	d := f.Driver
	var out []Finding
	if !d.Loaded && !d.Modules["nvidia"] {
		out = append(out, Finding{
			ID: "driver.modules", Severity: SeverityFail,
			Message:  "the nvidia kernel module is not loaded",
			Evidence: "/proc/driver/nvidia/version missing; nvidia not in /proc/modules",
			Remedy:   "modprobe nvidia (check dmesg for why it failed)",
		})
		return out
	}
	uvmDev := slices.Contains(d.DevNodes, "/dev/nvidia-uvm")
	switch {
	case d.Modules["nvidia_uvm"] || uvmDev:
		out = append(out, ok("driver.modules", "nvidia and nvidia_uvm are present (nvidia_drm is not needed for CUDA)",
			fmt.Sprintf("nvidia_uvm loaded=%t, /dev/nvidia-uvm present=%t", d.Modules["nvidia_uvm"], uvmDev)))
	default:
		out = append(out, Finding{
			ID: "driver.modules", Severity: SeverityWarn,
			Message: "nvidia_uvm is not loaded and /dev/nvidia-uvm is missing; on bare metal the first CUDA call loads it " +
				"(nvidia-modprobe), inside a container CUDA will fail",
			Evidence: "nvidia_uvm not in /proc/modules; no /dev/nvidia-uvm",
			Remedy:   "run `nvidia-modprobe -u -c=0` on the host (or modprobe nvidia_uvm) before starting containers",
		})
	}
	return out
}

func checkGPUCount(f Facts, want Want) []Finding {
	needGPU, n := want.gpusWanted()
	visible := visibleGPUCount(f)
	ev := fmt.Sprintf("%d GPUs visible, --nproc-per-node %q", visible, want.NProc)
	switch {
	case !needGPU:
		return checkGPUCountUnasked(f, want, visible, ev)
	case visible == 0:
		return []Finding{{
			ID: "gpu.count", Severity: SeverityFail,
			Message: "the job asks for GPUs but none are visible", Evidence: ev,
			Remedy: "run on a GPU node, fix CUDA_VISIBLE_DEVICES, or use --nproc-per-node cpu",
		}}
	case n > visible:
		return []Finding{{
			ID: "gpu.count", Severity: SeverityFail,
			Message: fmt.Sprintf("the job starts %d GPU processes but only %d GPUs are visible", n, visible), Evidence: ev,
			Remedy: fmt.Sprintf("use --nproc-per-node %d (or gpu), or a node with more GPUs", visible),
		}}
	}
	for _, id := range want.GPUIDs {
		if id < 0 || id >= visible {
			return []Finding{{
				ID: "gpu.count", Severity: SeverityFail,
				Message:  fmt.Sprintf("GPU %d is requested but the node has GPUs 0-%d", id, visible-1),
				Evidence: ev, Remedy: "pick GPU indexes that exist on every node",
			}}
		}
	}
	if n > 0 && n < visible {
		return []Finding{ok("gpu.count", fmt.Sprintf("%d of %d GPUs will be used", n, visible), ev)}
	}
	return []Finding{ok("gpu.count", "GPU count fits the job", ev)}
}

// checkGPUCountUnasked judges the GPU count of a job that does not ask for
// GPUs by name: a CPU job, or a worker count that may or may not mean one
// GPU per rank. It speaks only of what the user gave, and never says a job
// runs on CPUs when CUDA_VISIBLE_DEVICES is what hides the GPUs.
func checkGPUCountUnasked(f Facts, want Want, visible int, ev string) []Finding {
	n, err := strconv.Atoi(want.NProc)
	numeric := err == nil
	switch {
	case visible == 0 && len(f.GPUs) > 0 && want.NProc == "cpu":
		return []Finding{ok("gpu.count", fmt.Sprintf("CUDA_VISIBLE_DEVICES hides the node's %d GPUs; the job runs on CPUs (--nproc-per-node cpu)", len(f.GPUs)), ev)}
	case visible == 0 && len(f.GPUs) > 0:
		return []Finding{{
			ID: "gpu.count", Severity: SeverityWarn,
			Message:  fmt.Sprintf("CUDA_VISIBLE_DEVICES hides all %d GPUs of the node: the workers see none (see env.cuda_visible_devices)", len(f.GPUs)),
			Evidence: ev,
			Remedy:   "fix or unset CUDA_VISIBLE_DEVICES for a GPU job; for a CPU job, --nproc-per-node cpu says so",
		}}
	case visible == 0:
		return []Finding{ok("gpu.count", "no GPUs; the job runs on CPUs", ev)}
	case want.NProc == "cpu":
		return []Finding{ok("gpu.count", fmt.Sprintf("the job runs on CPUs (--nproc-per-node cpu); the node's %d GPUs are not used", visible), ev)}
	case numeric && n > visible:
		return []Finding{{
			ID: "gpu.count", Severity: SeverityWarn,
			Message:  fmt.Sprintf("%d workers but %d GPUs: with one GPU per rank (LOCAL_RANK as the device) ranks %d and up have none", n, visible, visible),
			Evidence: ev,
			Remedy:   fmt.Sprintf("use --nproc-per-node %d (or gpu) for a GPU job; ignore this for a CPU job", visible),
		}}
	case numeric:
		workers := fmt.Sprintf("%d workers", n)
		if n == 1 {
			workers = "1 worker"
		}
		return []Finding{ok("gpu.count", workers+fmt.Sprintf(", %d GPUs visible: enough for one GPU per rank", visible), ev)}
	}
	return []Finding{ok("gpu.count", fmt.Sprintf("%d GPUs visible", visible), ev)}
}

// visibleGPUCount is the number of GPUs CUDA will show: the GPUs, reduced by
// CUDA_VISIBLE_DEVICES when it is set.
func visibleGPUCount(f Facts) int {
	v, set := f.Env["CUDA_VISIBLE_DEVICES"]
	if !set {
		return len(f.GPUs)
	}
	ids, _ := parseVisibleDevices(v)
	n := 0
	for _, id := range ids {
		if id.valid(f.GPUs) {
			n++
		} else {
			break // CUDA stops at the first invalid entry
		}
	}
	return n
}

type visibleID struct {
	index int    // -1 when given as a UUID
	uuid  string // "GPU-..." prefix
}

func (v visibleID) valid(gpus []GPUFacts) bool {
	if v.uuid != "" {
		for _, g := range gpus {
			if strings.HasPrefix(g.UUID, v.uuid) {
				return true
			}
		}
		return false
	}
	return v.index >= 0 && v.index < len(gpus)
}

// parseVisibleDevices splits CUDA_VISIBLE_DEVICES into entries; bad
// entries are returned in the second result.
func parseVisibleDevices(v string) ([]visibleID, []string) {
	var ids []visibleID
	var bad []string
	if strings.TrimSpace(v) == "" {
		return nil, nil
	}
	for _, e := range strings.Split(v, ",") {
		e = strings.TrimSpace(e)
		if strings.HasPrefix(e, "GPU-") || strings.HasPrefix(e, "MIG-") {
			ids = append(ids, visibleID{index: -1, uuid: e})
			continue
		}
		n, err := strconv.Atoi(e)
		if err != nil {
			bad = append(bad, e)
			ids = append(ids, visibleID{index: -1, uuid: "\x00" + e})
			continue
		}
		ids = append(ids, visibleID{index: n})
	}
	return ids, bad
}

func checkVisibleDevices(f Facts, want Want) []Finding {
	v, set := f.Env["CUDA_VISIBLE_DEVICES"]
	if !set {
		return nil
	}
	needGPU, _ := want.gpusWanted()
	ev := fmt.Sprintf("CUDA_VISIBLE_DEVICES=%q, %d GPUs on the node", secret.Redact("CUDA_VISIBLE_DEVICES", v), len(f.GPUs))
	ids, _ := parseVisibleDevices(v)
	if len(ids) == 0 {
		fd := Finding{ID: "env.cuda_visible_devices", Severity: SeverityWarn,
			Message: "CUDA_VISIBLE_DEVICES is set but empty: CUDA sees no GPU", Evidence: ev,
			Remedy: "unset CUDA_VISIBLE_DEVICES; gorun assigns one GPU per local rank"}
		if needGPU {
			fd.Severity = SeverityFail
		}
		return []Finding{fd}
	}
	for i, id := range ids {
		if !id.valid(f.GPUs) {
			return []Finding{{ID: "env.cuda_visible_devices", Severity: SeverityFail,
				Message:  fmt.Sprintf("CUDA_VISIBLE_DEVICES entry %d does not name a GPU of this node; CUDA ignores it and every entry after it", i),
				Evidence: ev, Remedy: "unset CUDA_VISIBLE_DEVICES, or list indexes below the node's GPU count"}}
		}
	}
	return []Finding{{ID: "env.cuda_visible_devices", Severity: SeverityWarn,
		Message:  "CUDA_VISIBLE_DEVICES is set on the node; local ranks only see these GPUs, in this order",
		Evidence: ev, Remedy: "unset it unless you mean to hide GPUs from the job"}}
}

// Retired-page limits from DCGM (common/DcgmGPUHardwareLimits.h).
const (
	retiredPagesSoft = 15
	retiredPagesMax  = 63
)

func checkGPUHealth(f Facts) []Finding {
	var out []Finding
	var eccOff []string
	for _, g := range f.GPUs {
		gid := fmt.Sprintf("GPU %d (%s)", g.Index, g.BusID)
		switch {
		case g.RetiredPagesPending:
			out = append(out, Finding{ID: "gpu.memory", Severity: SeverityFail,
				Message: gid + " has page retirements pending; they take effect only after a reset", Evidence: fmt.Sprintf("%d pages retired, retirement pending", g.RetiredPages),
				Remedy: "drain the node and reset the GPU (nvidia-smi -r) or reboot"})
		case g.RetiredPages >= retiredPagesMax:
			out = append(out, Finding{ID: "gpu.memory", Severity: SeverityFail,
				Message: gid + " has retired the maximum number of pages", Evidence: fmt.Sprintf("%d retired pages (limit %d)", g.RetiredPages, retiredPagesMax),
				Remedy: "drain the node and have the GPU replaced"})
		case g.RetiredPages >= retiredPagesSoft:
			out = append(out, Finding{ID: "gpu.memory", Severity: SeverityWarn,
				Message: gid + " has many retired pages", Evidence: fmt.Sprintf("%d retired pages (soft limit %d)", g.RetiredPages, retiredPagesSoft),
				Remedy: "watch it; plan a GPU replacement"})
		}
		switch {
		case g.RemapFailed:
			out = append(out, Finding{ID: "gpu.memory", Severity: SeverityFail,
				Message: gid + " failed to remap a memory row", Evidence: "row remapping failure occurred",
				Remedy: "drain the node and have the GPU replaced"})
		case g.RemapPending:
			out = append(out, Finding{ID: "gpu.memory", Severity: SeverityWarn,
				Message: gid + " has a row remap pending; it takes effect after a GPU reset", Evidence: "row remap pending",
				Remedy: "reset the GPU (nvidia-smi -r) or reboot when the node is idle"})
		}
		if g.UncorrectedECC > 0 {
			out = append(out, Finding{ID: "gpu.ecc", Severity: SeverityWarn,
				Message: gid + " has seen uncorrected ECC errors since the driver loaded", Evidence: fmt.Sprintf("%d volatile uncorrected ECC errors", g.UncorrectedECC),
				Remedy: "check dmesg for Xid 48/63/94; reset the GPU if errors keep coming"})
		}
		if g.ECC != nil && !*g.ECC {
			eccOff = append(eccOff, strconv.Itoa(g.Index))
		}
	}
	if len(eccOff) > 0 {
		out = append(out, Finding{ID: "gpu.ecc", Severity: SeverityWarn,
			Message: "ECC is disabled on GPUs " + strings.Join(eccOff, ","), Evidence: "ECC mode current=disabled",
			Remedy: "enable it (nvidia-smi -e 1) and reset the GPUs, unless disabled on purpose"})
	}
	if len(out) == 0 {
		out = append(out, ok("gpu.memory", "no pending page retirement, row remap failure or uncorrected ECC error",
			fmt.Sprintf("%d GPUs checked", len(f.GPUs))))
	}
	return out
}

func checkGPUModes(f Facts) []Finding {
	var out []Finding
	for _, g := range f.GPUs {
		gid := fmt.Sprintf("GPU %d", g.Index)
		busy := len(g.Processes) > 0
		if busy {
			var ps []string
			for _, p := range g.Processes {
				ps = append(ps, fmt.Sprintf("pid %d %s (%d MiB)", p.PID, p.Name, p.UsedMiB))
			}
			sev := SeverityWarn
			if strings.HasPrefix(g.ComputeMode, "Exclusive") {
				sev = SeverityFail
			}
			out = append(out, Finding{ID: "gpu.busy", Severity: sev,
				Message:  gid + " is already running compute processes; the job will share it",
				Evidence: strings.Join(ps, ", ") + "; compute mode " + g.ComputeMode,
				Remedy:   "wait for them to finish or stop them, or pick other GPUs"})
		}
		switch g.ComputeMode {
		case "Prohibited":
			out = append(out, Finding{ID: "gpu.compute_mode", Severity: SeverityFail,
				Message: gid + " is in Prohibited compute mode: no CUDA context can be created", Evidence: "compute mode Prohibited",
				Remedy: fmt.Sprintf("nvidia-smi -i %d -c DEFAULT", g.Index)})
		case "Exclusive_Process", "Exclusive_Thread":
			if !busy {
				out = append(out, ok("gpu.compute_mode", gid+" is exclusive; one rank per GPU works", "compute mode "+g.ComputeMode))
			}
		}
		if g.MIG {
			out = append(out, Finding{ID: "gpu.mig", Severity: SeverityWarn,
				Message:  gid + " has MIG enabled: CUDA sees MIG instances, not the GPU, and NCCL has no P2P between them",
				Evidence: "MIG mode enabled",
				Remedy:   fmt.Sprintf("disable MIG for distributed training (nvidia-smi -i %d -mig 0, then reset)", g.Index)})
		}
	}
	var noPersist []string
	for _, g := range f.GPUs {
		if !g.Persistence && !unsupported(g, "persistence mode") {
			noPersist = append(noPersist, strconv.Itoa(g.Index))
		}
	}
	if len(noPersist) > 0 && f.Source == "nvml" {
		out = append(out, Finding{ID: "gpu.persistence", Severity: SeverityWarn,
			Message:  "persistence mode is off on GPUs " + strings.Join(noPersist, ",") + "; every job start pays driver initialisation",
			Evidence: "persistence mode disabled",
			Remedy:   "enable nvidia-persistenced (or nvidia-smi -pm 1)"})
	}
	if len(out) == 0 {
		out = append(out, ok("gpu.mode", "GPUs idle, compute mode Default, MIG off, persistence on", fmt.Sprintf("%d GPUs", len(f.GPUs))))
	}
	return out
}

func checkPCIe(f Facts) []Finding {
	var out []Finding
	var genDown []string
	for _, g := range f.GPUs {
		if g.PCIeWidthMax > 0 && g.PCIeWidth > 0 && g.PCIeWidth < g.PCIeWidthMax {
			out = append(out, Finding{ID: "gpu.pcie_width", Severity: SeverityWarn,
				Message:  fmt.Sprintf("GPU %d PCIe link runs at x%d of x%d: host transfers are slower", g.Index, g.PCIeWidth, g.PCIeWidthMax),
				Evidence: fmt.Sprintf("width x%d, max x%d (%s)", g.PCIeWidth, g.PCIeWidthMax, g.BusID),
				Remedy:   "reseat the GPU or riser; check the slot and BIOS lane settings"})
		}
		if g.PCIeGenMax > 0 && g.PCIeGen > 0 && g.PCIeGen < g.PCIeGenMax {
			genDown = append(genDown, fmt.Sprintf("GPU %d gen %d/%d", g.Index, g.PCIeGen, g.PCIeGenMax))
		}
	}
	if len(genDown) > 0 {
		out = append(out, ok("gpu.pcie_gen", "PCIe generation below max; GPUs drop link speed when idle, so this alone is not a fault",
			strings.Join(genDown, ", ")))
	}
	if len(out) == 0 {
		out = append(out, ok("gpu.pcie_width", "every GPU's PCIe link runs at full width", pcieSummary(f.GPUs)))
	}
	return out
}

func pcieSummary(gpus []GPUFacts) string {
	var s []string
	for _, g := range gpus {
		s = append(s, fmt.Sprintf("GPU %d gen %d x%d", g.Index, g.PCIeGen, g.PCIeWidth))
	}
	return strings.Join(s, ", ")
}

func checkP2P(f Facts) []Finding {
	if len(f.GPUs) < 2 || len(f.P2P) == 0 {
		return nil
	}
	var bad []string
	measured := false
	for i := range f.P2P {
		for j := range f.P2P[i] {
			if i == j {
				continue
			}
			p := f.P2P[i][j]
			if p.Read != "" || p.Write != "" {
				measured = true
			}
			if (p.Read != "" && p.Read != P2POK) || (p.Write != "" && p.Write != P2POK) {
				bad = append(bad, fmt.Sprintf("GPU%d→GPU%d read %s write %s", i, j, or(p.Read, "?"), or(p.Write, "?")))
			}
		}
	}
	if !measured {
		return nil
	}
	if len(bad) > 0 {
		return []Finding{{ID: "gpu.p2p", Severity: SeverityWarn,
			Message:  "peer-to-peer access is not available between some GPUs; NCCL falls back to copies through host memory (slower)",
			Evidence: strings.Join(bad, "; "),
			Remedy:   "check IOMMU/ACS settings in BIOS and kernel (iommu=pt), and for VMs the hypervisor's P2P support"}}
	}
	return []Finding{ok("gpu.p2p", "P2P read and write OK between every GPU pair", fmt.Sprintf("%d GPUs", len(f.GPUs)))}
}

func checkTopology(f Facts) []Finding {
	if len(f.Topology) < 2 {
		return nil
	}
	var sys, all []string
	for i := range f.Topology {
		for j := i + 1; j < len(f.Topology[i]); j++ {
			t := f.Topology[i][j]
			all = append(all, fmt.Sprintf("GPU%d-GPU%d %s", i, j, or(t, "?")))
			if t == "SYS" {
				sys = append(sys, fmt.Sprintf("GPU%d-GPU%d", i, j))
			}
		}
	}
	if len(sys) > 0 {
		return []Finding{{ID: "gpu.topology", Severity: SeverityWarn,
			Message:  "some GPU pairs talk across CPU sockets (SYS): traffic crosses the inter-socket link",
			Evidence: strings.Join(sys, ", "),
			Remedy:   "place ranks that talk most on the same socket, or use fewer GPUs per node on this machine"}}
	}
	return []Finding{ok("gpu.topology", "no GPU pair crosses CPU sockets", strings.Join(all, ", "))}
}

func checkNVLink(f Facts) []Finding {
	anyActive := false
	for _, g := range f.GPUs {
		for _, l := range g.NVLinks {
			anyActive = anyActive || l.Active
		}
	}
	var out []Finding
	total := 0
	for _, g := range f.GPUs {
		var down []string
		active := 0
		for _, l := range g.NVLinks {
			if l.Active {
				active++
			} else {
				down = append(down, strconv.Itoa(l.Link))
			}
		}
		total += active
		if len(down) > 0 && anyActive {
			out = append(out, Finding{ID: "gpu.nvlink", Severity: SeverityFail,
				Message:  fmt.Sprintf("GPU %d has %d NVLink link(s) down", g.Index, len(down)),
				Evidence: fmt.Sprintf("links %s inactive, %d active", strings.Join(down, ","), active),
				Remedy:   "drain the node; check the fabric manager (systemctl status nvidia-fabricmanager) and reset or reboot"})
		}
		switch g.FabricState {
		case "not_started", "in_progress":
			out = append(out, Finding{ID: "gpu.fabric", Severity: SeverityFail,
				Message:  fmt.Sprintf("GPU %d NVSwitch fabric is not ready; CUDA fails until the fabric manager finishes", g.Index),
				Evidence: "fabric state " + g.FabricState,
				Remedy:   "start nvidia-fabricmanager and wait for it (systemctl status nvidia-fabricmanager)"})
		}
	}
	if len(out) == 0 && anyActive {
		out = append(out, ok("gpu.nvlink", "every NVLink is up", fmt.Sprintf("%d active links on %d GPUs", total, len(f.GPUs))))
	}
	return out
}

// checkScript fails a node that lacks the training script where the
// head would have torchrun run it: the code is not synced there, or the
// working directory the head gives (its own) does not exist there.
func checkScript(f Facts) []Finding {
	if f.ScriptMissing == "" {
		return nil
	}
	return []Finding{{ID: "script.present", Severity: SeverityFail,
		Message:  "the training script is not on this node: torchrun would start and its workers fail at once",
		Evidence: f.ScriptMissing + ": no such file or directory",
		Remedy:   "sync the code to every node at the same path (the head's working directory is each node's), or run gorun from a directory every node has"}}
}

// checkTorch fails a node whose torchrun interpreter cannot find a
// usable torch: torchrun is torch.distributed.run, so nothing starts
// there. Where the interpreter is only a guess (torchrun's #! line names
// none: a wrapper), it warns instead. No finding when torch was not
// looked for, or the probe stalled (collect.stalled says so).
func checkTorch(f Facts) []Finding {
	t := f.Torch
	switch {
	case t.TorchrunMissing != "":
		return []Finding{{ID: "torch.torchrun", Severity: SeverityFail,
			Message:  "the torchrun command is not there to run on this node: nothing would start",
			Evidence: t.TorchrunMissing,
			Remedy:   "give --torchrun the path of the torchrun that the node's venv or conda env has, or install torch there (torchrun comes with it)"}}
	case t.Found:
		return []Finding{ok("torch.found", "torchrun's Python finds torch "+t.Version, t.Python)}
	case t.Err == "":
		return nil
	case t.Guessed:
		return []Finding{{ID: "torch.found", Severity: SeverityWarn,
			Message:  "python3 on the PATH finds no usable torch; torchrun is not a Python script, so its own interpreter was not checked",
			Evidence: t.Err,
			Remedy:   "make sure the interpreter behind --torchrun has torch; run `gorun preflight` with --torchrun pointing at the venv's torchrun"}}
	}
	return []Finding{{ID: "torch.found", Severity: SeverityFail,
		Message:  "torchrun's Python finds no usable torch: torchrun cannot start on this node",
		Evidence: t.Err,
		Remedy:   fmt.Sprintf("install torch for %s on this node, or point --torchrun at a torchrun whose venv has it", t.Python)}}
}

// checkCUDA compares the driver's CUDA version with the torch build's
// (facts §6): major lower fails, minor lower warns (minor version
// compatibility, limited features), equal or higher is ok.
func checkCUDA(f Facts) []Finding {
	tc := f.Torch.CUDA
	if tc == "" || f.Driver.CUDADriverVersion == 0 {
		return nil
	}
	tmaj, tmin, err := parseMajorMinor(tc)
	if err != nil {
		return []Finding{{ID: "cuda.compat", Severity: SeverityWarn,
			Message: "torch's CUDA version is unreadable", Evidence: fmt.Sprintf("torch.version.cuda %q", tc)}}
	}
	dv := f.Driver.CUDADriverVersion
	dmaj, dmin := dv/1000, (dv%1000)/10
	ev := fmt.Sprintf("driver supports CUDA %d.%d (driver %s), torch built for CUDA %s", dmaj, dmin, f.Driver.DriverVersion, tc)
	if compat := strings.Contains(f.Env["LD_LIBRARY_PATH"], "compat"); compat {
		ev += "; LD_LIBRARY_PATH has a compat directory (forward compatibility)"
	}
	switch {
	case dmaj < tmaj:
		return []Finding{{ID: "cuda.compat", Severity: SeverityFail,
			Message:  "the driver is too old for this torch build: CUDA calls will fail",
			Evidence: ev,
			Remedy:   fmt.Sprintf("upgrade the NVIDIA driver to one supporting CUDA %s, or install a torch build for CUDA %d.x", tc, dmaj)}}
	case dmaj == tmaj && dmin < tmin:
		return []Finding{{ID: "cuda.compat", Severity: SeverityWarn,
			Message:  "the driver's CUDA is older than torch's; it runs under minor version compatibility with a limited feature set (no PTX JIT of newer code)",
			Evidence: ev,
			Remedy:   "upgrade the driver if kernels fail to load"}}
	}
	return []Finding{ok("cuda.compat", "the driver supports torch's CUDA version", ev)}
}

func parseMajorMinor(s string) (int, int, error) {
	a, b, _ := strings.Cut(strings.TrimSpace(s), ".")
	maj, err := strconv.Atoi(a)
	if err != nil {
		return 0, 0, fmt.Errorf("version %q: %w", s, err)
	}
	minr := 0
	if b != "" {
		b, _, _ = strings.Cut(b, ".")
		if minr, err = strconv.Atoi(b); err != nil {
			return 0, 0, fmt.Errorf("version %q: %w", s, err)
		}
	}
	return maj, minr, nil
}

func cudaString(v int) string {
	if v == 0 {
		return "?"
	}
	return fmt.Sprintf("%d.%d", v/1000, (v%1000)/10)
}

func checkRDMA(f Facts, haveGPUs bool) []Finding {
	if len(f.RDMA) == 0 {
		return []Finding{ok("rdma.ports", "no RDMA devices; NCCL uses TCP sockets between nodes", "/sys/class/infiniband empty or missing")}
	}
	var out []Finding
	var active []string
	for _, p := range f.RDMA {
		name := p.Name()
		if p.State != "ACTIVE" {
			out = append(out, Finding{ID: "rdma.ports", Severity: SeverityWarn,
				Message:  "RDMA port " + name + " is not ACTIVE; NCCL will not use it",
				Evidence: fmt.Sprintf("state %s, phys_state %s, %s", or(p.State, "?"), or(p.PhysState, "?"), p.LinkLayer),
				Remedy:   "check the cable and switch port (ibstat), or leave the port out of NCCL_IB_HCA"})
			continue
		}
		active = append(active, fmt.Sprintf("%s %s %s", name, p.LinkLayer, p.Rate))
		if p.LinkLayer == "Ethernet" && len(p.RoCEv2GIDs) == 0 {
			out = append(out, Finding{ID: "rdma.gid", Severity: SeverityWarn,
				Message:  "RoCE port " + name + " has no RoCE v2 GID with an address; NCCL cannot pick a routable GID",
				Evidence: "no gid_attrs/types entry \"RoCE v2\" with a non-link-local GID" + netdevNote(p),
				Remedy:   "assign an IP address to " + or(p.NetDev, "the port's netdev") + " and check the RoCE mode (cma_roce_mode)"})
		}
	}
	if len(active) > 0 {
		out = append(out, ok("rdma.ports", fmt.Sprintf("%d RDMA ports ACTIVE", len(active)), strings.Join(active, ", ")))
		if haveGPUs {
			if f.GDR.Module == "" {
				out = append(out, Finding{ID: "rdma.gdr", Severity: SeverityWarn,
					Message:  "no GPUDirect RDMA module (nvidia_peermem) loaded; NCCL may still use DMA-BUF, else it stages through host memory",
					Evidence: "no /sys/module/nvidia_peermem, no /sys/kernel/mm/memory_peers/nv_mem",
					Remedy:   "modprobe nvidia_peermem (needs MOFED/inbox RDMA and a matching driver)"})
			} else {
				out = append(out, ok("rdma.gdr", "GPUDirect RDMA module present", f.GDR.Module+" ("+f.GDR.Evidence+")"))
			}
		}
		if f.MemlockBytes >= 0 && f.MemlockBytes < 1<<30 {
			out = append(out, Finding{ID: "sys.memlock", Severity: SeverityWarn,
				Message:  "the locked-memory limit is small; RDMA memory registration will fail",
				Evidence: fmt.Sprintf("RLIMIT_MEMLOCK %d bytes", f.MemlockBytes),
				Remedy:   "set `ulimit -l unlimited` (limits.conf memlock, or the container's --ulimit memlock=-1)"})
		}
	}
	return out
}

func netdevNote(p RDMAPort) string {
	if p.NetDev == "" {
		return ""
	}
	return "; netdev " + p.NetDev
}

func checkLimits(f Facts) []Finding {
	const gib = 1 << 30
	switch {
	case f.ShmBytes == 0:
		return []Finding{{ID: "sys.shm", Severity: SeverityWarn,
			Message:  "/dev/shm is missing; NCCL's shared-memory transport and DataLoader workers need it",
			Evidence: "statfs /dev/shm failed",
			Remedy:   "mount a tmpfs on /dev/shm (docker: --shm-size=16g or --ipc=host)"}}
	case f.ShmBytes < gib:
		return []Finding{{ID: "sys.shm", Severity: SeverityWarn,
			Message:  "/dev/shm is small; NCCL and DataLoader workers may fail with bus errors",
			Evidence: fmt.Sprintf("/dev/shm %s", humanBytes(f.ShmBytes)),
			Remedy:   "docker: --shm-size=16g or --ipc=host; Kubernetes: an emptyDir with medium Memory on /dev/shm"}}
	}
	return []Finding{ok("sys.shm", "/dev/shm is large enough", "/dev/shm "+humanBytes(f.ShmBytes))}
}

func humanBytes(n int64) string {
	const gib, mib = 1 << 30, 1 << 20
	if n >= gib {
		return fmt.Sprintf("%.1f GiB", float64(n)/gib)
	}
	return fmt.Sprintf("%d MiB", n/mib)
}

func checkRoute(f Facts) []Finding {
	if f.Route == nil {
		return nil
	}
	r := f.Route
	if r.Err != "" {
		return []Finding{{ID: "net.route", Severity: SeverityFail,
			Message:  "no route to " + r.Target,
			Evidence: r.Err,
			Remedy:   "check that the master address resolves and routes from this node"}}
	}
	if r.Probe > 0 && r.ProbeErr != "" {
		return []Finding{{ID: "net.route", Severity: SeverityFail,
			Message:  fmt.Sprintf("cannot open a TCP connection to %s port %d from %s (%s)", r.Target, r.Probe, or(r.Interface, "?"), r.Source),
			Evidence: r.ProbeErr,
			Remedy:   "check firewalls and routing between this node and the master; set NCCL_SOCKET_IFNAME/GLOO_SOCKET_IFNAME with --env to another interface"}}
	}
	if r.Probe > 0 {
		return []Finding{ok("net.route", fmt.Sprintf("reaches %s through %s: TCP to port %d connected in %.1f ms", r.Target, or(r.Interface, "?"), r.Probe, r.ProbeMs), "source address "+r.Source)}
	}
	return []Finding{ok("net.route", "reaches "+r.Target+" through "+or(r.Interface, "?"), "source address "+r.Source)}
}

func or(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// unsupported reports whether NVML could not answer the named fact for g.
func unsupported(g GPUFacts, what string) bool {
	for _, u := range g.Unsupported {
		if strings.HasPrefix(u, what+":") {
			return true
		}
	}
	return false
}

// cudaDebugEnv are variables DCGM's deployment check warns about: each turns
// on a debugger, profiler, injection or core dumps that slow CUDA down or
// change how it fails.
var cudaDebugEnv = []string{
	"NSIGHT_CUDA_DEBUGGER", "CUDA_INJECTION32_PATH", "CUDA_INJECTION64_PATH", "CUDA_AUTO_BOOST",
	"CUDA_ENABLE_COREDUMP_ON_EXCEPTION", "CUDA_COREDUMP_FILE", "CUDA_DEVICE_WAITS_ON_EXCEPTION",
	"CUDA_PROFILE", "COMPUTE_PROFILE", "OPENCL_PROFILE",
}

func checkCUDAEnv(f Facts) []Finding {
	var set []string
	for _, name := range cudaDebugEnv {
		if v, ok := f.Env[name]; ok {
			set = append(set, name+"="+secret.Redact(name, v))
		}
	}
	if len(set) == 0 {
		return nil
	}
	return []Finding{{
		ID: "env.cuda_debug", Severity: SeverityWarn,
		Message:  "CUDA debugging, profiling or core-dump variables are set; they slow jobs down or change how they fail",
		Evidence: strings.Join(set, " "),
		Remedy:   "unset them unless you are debugging on purpose",
	}}
}

func checkClocks(f Facts) []Finding {
	var slow, temps []string
	for _, g := range f.GPUs {
		if g.TemperatureC > 0 {
			temps = append(temps, fmt.Sprintf("GPU %d %d C", g.Index, g.TemperatureC))
		}
		for _, e := range g.ClockEvents {
			if clockevent.IsSlowdown(e) { // a fault or a cooling or power problem
				slow = append(slow, fmt.Sprintf("GPU %d: %s (%d C)", g.Index, e, g.TemperatureC))
			}
		}
	}
	if len(slow) > 0 {
		return []Finding{{
			ID: "gpu.clocks", Severity: SeverityWarn,
			Message:  "GPU clocks are held down by a thermal, power-brake or hardware slowdown",
			Evidence: strings.Join(slow, "; "),
			Remedy:   "check cooling and power (nvidia-smi -q -d PERFORMANCE,TEMPERATURE); a slowdown on an idle GPU points to a hardware fault",
		}}
	}
	if len(temps) == 0 {
		return nil
	}
	return []Finding{ok("gpu.clocks", "no thermal or hardware clock slowdown", strings.Join(temps, ", "))}
}
