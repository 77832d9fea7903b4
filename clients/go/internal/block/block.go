// Package block reads a policy block given as JSON over the settings a
// block type already holds, so that every block's UnmarshalJSON is the
// same few lines in one place.
package block

import "encoding/json"

// Reader is a block's settings that read a decoded block over themselves:
// the keys it names replace theirs, the others keep theirs.
type Reader[T any] interface {
	FromMap(block map[string]any) (T, error)
}

// Unmarshal reads the JSON object text as a block over *p; on an error *p
// is unchanged.
func Unmarshal[T Reader[T]](text []byte, p *T) error {
	var decoded map[string]any
	if err := json.Unmarshal(text, &decoded); err != nil {
		return err
	}
	read, err := (*p).FromMap(decoded)
	if err != nil {
		return err
	}
	*p = read
	return nil
}
