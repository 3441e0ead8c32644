package preflight

import (
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
)

// collectRDMA lists every port under /sys/class/infiniband (the kernel ABI
// in Documentation/ABI/stable/sysfs-class-infiniband). No directory means
// no RDMA devices, which is not an error.
func collectRDMA(r sysReader) ([]RDMAPort, error) {
	base := "sys/class/infiniband"
	devs, err := os.ReadDir(r.path(base))
	if err != nil {
		if os.IsNotExist(err) {
			return nil, nil
		}
		return nil, fmt.Errorf("read /%s: %w", base, err)
	}
	var out []RDMAPort
	for _, dev := range devs {
		if strings.HasPrefix(dev.Name(), ".") {
			continue
		}
		devDir := base + "/" + dev.Name()
		ports, err := os.ReadDir(r.path(devDir + "/ports"))
		if errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ENOTDIR) {
			continue // not a device directory
		}
		if err != nil {
			return out, fmt.Errorf("read /%s/ports: %w", devDir, err)
		}
		numa := r.readInt(devDir+"/device/numa_node", -1)
		netdev := firstEntry(r, devDir+"/device/net")
		for _, p := range ports {
			n, err := strconv.Atoi(p.Name())
			if err != nil {
				continue
			}
			out = append(out, rdmaPort(r, dev.Name(), devDir+"/ports/"+p.Name(), n, numa, netdev))
		}
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Device != out[j].Device {
			return out[i].Device < out[j].Device
		}
		return out[i].Port < out[j].Port
	})
	return out, nil
}

func rdmaPort(r sysReader, dev, dir string, port, numa int, netdev string) RDMAPort {
	p := RDMAPort{Device: dev, Port: port, NUMANode: numa, NetDev: netdev}
	p.State = afterColon(r, dir+"/state")          // "4: ACTIVE"
	p.PhysState = afterColon(r, dir+"/phys_state") // "5: LinkUp"
	p.LinkLayer, _ = r.read(dir + "/link_layer")
	p.Rate, _ = r.read(dir + "/rate")
	gids, _ := os.ReadDir(r.path(dir + "/gids"))
	idx := make([]int, 0, len(gids))
	for _, g := range gids {
		if n, err := strconv.Atoi(g.Name()); err == nil {
			idx = append(idx, n)
		}
	}
	sort.Ints(idx)
	for _, n := range idx {
		ns := strconv.Itoa(n)
		// In containers reading a type can fail with EINVAL; NCCL skips
		// such entries and so do we.
		typ, err := r.read(dir + "/gid_attrs/types/" + ns)
		if err != nil || !strings.EqualFold(typ, "RoCE v2") {
			continue
		}
		gid, err := r.read(dir + "/gids/" + ns)
		if err != nil || !usableGID(gid) {
			continue
		}
		p.RoCEv2GIDs = append(p.RoCEv2GIDs, ns+"="+gid)
		if p.NetDev == "" {
			p.NetDev, _ = r.read(dir + "/gid_attrs/ndevs/" + ns)
		}
	}
	return p
}

// usableGID is false for the all-zero and link-local GIDs NCCL skips.
func usableGID(gid string) bool {
	ip := net.ParseIP(strings.ReplaceAll(gid, "-", ":"))
	if ip == nil {
		return false
	}
	return !ip.IsUnspecified() && !ip.IsLinkLocalUnicast()
}

// afterColon reads a "4: ACTIVE" style file and returns "ACTIVE".
func afterColon(r sysReader, p string) string {
	s, err := r.read(p)
	if err != nil {
		return ""
	}
	if _, v, ok := strings.Cut(s, ":"); ok {
		return strings.TrimSpace(v)
	}
	return s
}

// firstEntry is the first name in a directory, "" when empty or missing.
func firstEntry(r sysReader, dir string) string {
	ents, err := os.ReadDir(r.path(dir))
	if err != nil || len(ents) == 0 {
		return ""
	}
	return filepath.Base(ents[0].Name())
}
