package envplan

import (
	"encoding/json"
	"reflect"
	"testing"
)

// A whole plan survives JSON both ways.
func TestPlanJSONRoundTrip(t *testing.T) {
	for _, c := range goldenCases() {
		t.Run(c.name, func(t *testing.T) {
			p, err := Build(c.spec, c.facts)
			if err != nil {
				t.Fatal(err)
			}
			b, err := json.Marshal(p)
			if err != nil {
				t.Fatal(err)
			}
			var back Plan
			if err := json.Unmarshal(b, &back); err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(back.Config, p.Config) {
				t.Errorf("config\n got %+v\nwant %+v", back.Config, p.Config)
			}
		})
	}
}
