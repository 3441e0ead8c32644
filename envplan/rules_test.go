package envplan

import "testing"

func TestNCCLDebugKnobs(t *testing.T) {
	knobs := NCCLDebugKnobs()
	for i, k := range knobs {
		if i > 0 && knobs[i-1] >= k {
			t.Errorf("list not sorted or duplicated at %s", k)
		}
		if !IsNCCLDebugKnob(k) {
			t.Errorf("IsNCCLDebugKnob(%s) = false", k)
		}
	}
	for _, name := range []string{"NCCL_ALGO", "NCCL_NET_GDR_LEVEL", "NCCL_BUFFSIZE", "NCCL_MAX_NCHANNELS"} {
		if !IsNCCLDebugKnob(name) {
			t.Errorf("%s is a debugging knob", name)
		}
	}
	for _, name := range []string{"NCCL_IB_HCA", "NCCL_IB_GID_INDEX", "NCCL_NVLS_ENABLE", "NCCL_DEBUG", ""} {
		if IsNCCLDebugKnob(name) {
			t.Errorf("%s is not a debugging knob", name)
		}
	}
	knobs[0] = "changed"
	if NCCLDebugKnobs()[0] == "changed" {
		t.Error("NCCLDebugKnobs returns the package's own slice")
	}
}
