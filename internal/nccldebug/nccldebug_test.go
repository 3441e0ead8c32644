package nccldebug

import "testing"

func TestKnobs(t *testing.T) {
	knobs := Knobs()
	for i, k := range knobs {
		if i > 0 && knobs[i-1] >= k {
			t.Errorf("list not sorted or duplicated at %s", k)
		}
		if !IsKnob(k) {
			t.Errorf("IsKnob(%s) = false", k)
		}
	}
	for _, name := range []string{"NCCL_ALGO", "NCCL_NET_GDR_LEVEL", "NCCL_BUFFSIZE", "NCCL_MAX_NCHANNELS"} {
		if !IsKnob(name) {
			t.Errorf("%s is a debugging knob", name)
		}
	}
	for _, name := range []string{"NCCL_IB_HCA", "NCCL_IB_GID_INDEX", "NCCL_NVLS_ENABLE", "NCCL_DEBUG", ""} {
		if IsKnob(name) {
			t.Errorf("%s is not a debugging knob", name)
		}
	}
	knobs[0] = "changed"
	if Knobs()[0] == "changed" {
		t.Error("Knobs returns the package's own slice")
	}
}
