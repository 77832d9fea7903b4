// Tests of reading a policy block over the settings held, a bad block
// changing nothing.

package block

import (
	"errors"
	"testing"
)

type limit struct{ Max float64 }

func (l limit) FromMap(block map[string]any) (limit, error) {
	if v, ok := block["max"]; ok {
		max, isNumber := v.(float64)
		if !isNumber || max < 0 {
			return l, errors.New("max must be a number of 0 or more")
		}
		l.Max = max
	}
	return l, nil
}

func TestABlockIsReadOverTheSettingsHeldAndABadOneChangesNothing(t *testing.T) {
	l := limit{Max: 3}
	if err := Unmarshal([]byte(`{}`), &l); err != nil || l.Max != 3 {
		t.Fatalf("an empty block keeps what is held: %v %v", l, err)
	}
	if err := Unmarshal([]byte(`{"max": 5}`), &l); err != nil || l.Max != 5 {
		t.Fatalf("a named key replaces it: %v %v", l, err)
	}
	for _, bad := range []string{`{"max": -1}`, `[1]`, `{`} {
		if err := Unmarshal([]byte(bad), &l); err == nil || l.Max != 5 {
			t.Fatalf("%s: want an error and nothing changed, got %v %v", bad, l, err)
		}
	}
}
