package hosts

import "testing"

func TestDescribe(t *testing.T) {
	for _, tc := range []struct {
		h    Host
		want string
	}{
		{Host{Name: "a", Slots: 8}, "a\tslots=8\tgpus=all"},
		{Host{Name: "b"}, "b\tslots=?\tgpus=all"},
		{Host{Name: "c", Slots: 2, GPUs: []int{0, 3}}, "c\tslots=2\tgpus=0,3"},
	} {
		if got := tc.h.Describe(); got != tc.want {
			t.Errorf("Describe(%+v) = %q, want %q", tc.h, got, tc.want)
		}
	}
}
