// Command tlogcheck verifies auditsync's transparency-log output with implementations
// auditsync did not write: golang.org/x/mod/sumdb/note (the signed checkpoint),
// golang.org/x/mod/sumdb/tlog (the tiles, read through TileHashReader, which authenticates
// every tile against the tree hash) and github.com/transparency-dev/merkle (RFC 9162
// inclusion and consistency proofs). It reads one JSON request on stdin and prints one
// JSON answer: for each check, "ok" or the verifier's error.
package main

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/transparency-dev/merkle/proof"
	"github.com/transparency-dev/merkle/rfc6962"
	"golang.org/x/mod/sumdb/note"
	"golang.org/x/mod/sumdb/tlog"
)

type checkpoint struct {
	Note   string `json:"note"`
	Origin string `json:"origin"`
	Tiles  string `json:"tiles"` // a folder holding tile/..., or "" for none
}

type inclusion struct {
	Index int64    `json:"index"`
	Size  int64    `json:"size"`
	Leaf  string   `json:"leaf"` // base64 of the leaf's bytes
	Proof []string `json:"proof"`
	Root  string   `json:"root"`
}

type consistency struct {
	Old     int64    `json:"old"`
	New     int64    `json:"new"`
	OldRoot string   `json:"old_root"`
	NewRoot string   `json:"new_root"`
	Proof   []string `json:"proof"`
}

type request struct {
	Vkey          string        `json:"vkey"`
	Checkpoints   []checkpoint  `json:"checkpoints"`
	Inclusions    []inclusion   `json:"inclusions"`
	Consistencies []consistency `json:"consistencies"`
}

type answer struct {
	Checkpoints   []string `json:"checkpoints"`
	Inclusions    []string `json:"inclusions"`
	Consistencies []string `json:"consistencies"`
}

// dirTiles reads C2SP tiles (tile/<L>/<N>[.p/<W>]) for tlog, whose paths carry the height.
type dirTiles struct{ dir string }

func (d dirTiles) Height() int { return 8 }

func (d dirTiles) ReadTiles(tiles []tlog.Tile) ([][]byte, error) {
	out := make([][]byte, len(tiles))
	for i, t := range tiles {
		c2sp := "tile/" + strings.TrimPrefix(t.Path(), "tile/8/")
		data, err := os.ReadFile(filepath.Join(d.dir, filepath.FromSlash(c2sp)))
		if err != nil {
			return nil, err
		}
		out[i] = data
	}
	return out, nil
}

func (d dirTiles) SaveTiles([]tlog.Tile, [][]byte) {}

func decodeAll(list []string) ([][]byte, error) {
	out := make([][]byte, len(list))
	for i, s := range list {
		b, err := base64.StdEncoding.DecodeString(s)
		if err != nil {
			return nil, err
		}
		out[i] = b
	}
	return out, nil
}

func result(err error) string {
	if err != nil {
		return err.Error()
	}
	return "ok"
}

func checkCheckpoint(v note.Verifier, c checkpoint) error {
	n, err := note.Open([]byte(c.Note), note.VerifierList(v))
	if err != nil {
		return err
	}
	lines := strings.Split(n.Text, "\n")
	if len(lines) < 4 || lines[0] != c.Origin {
		return fmt.Errorf("not a checkpoint of %q", c.Origin)
	}
	size, err := strconv.ParseInt(lines[1], 10, 64)
	if err != nil {
		return err
	}
	root, err := tlog.ParseHash(lines[2])
	if err != nil {
		return err
	}
	if c.Tiles == "" || size == 0 {
		return nil
	}
	tree := tlog.Tree{N: size, Hash: root}
	hr := tlog.TileHashReader(tree, dirTiles{c.Tiles})
	got, err := tlog.TreeHash(size, hr)
	if err != nil {
		return err
	}
	if got != root {
		return fmt.Errorf("tiles hash to %v, not %v", got, root)
	}
	// Every entry bundle hashes to its level-0 tile, and every record proves into the tree.
	for start := int64(0); start < size; start += 256 {
		w := size - start
		if w > 256 {
			w = 256
		}
		t := tlog.Tile{H: 8, L: -1, N: start / 256, W: int(w)}
		path := "tile/entries/" + strings.TrimPrefix(t.Path(), "tile/8/data/")
		data, err := os.ReadFile(filepath.Join(c.Tiles, filepath.FromSlash(path)))
		if err != nil {
			return err
		}
		for i := int64(0); i < w; i++ {
			if len(data) < 2 {
				return fmt.Errorf("%s ends early", path)
			}
			l := int(data[0])<<8 | int(data[1])
			if len(data) < 2+l {
				return fmt.Errorf("%s ends early", path)
			}
			leaf := tlog.RecordHash(data[2 : 2+l])
			data = data[2+l:]
			p, err := tlog.ProveRecord(size, start+i, hr)
			if err != nil {
				return err
			}
			if err := tlog.CheckRecord(p, size, root, start+i, leaf); err != nil {
				return fmt.Errorf("entry %d: %v", start+i, err)
			}
		}
		if len(data) != 0 {
			return fmt.Errorf("%s holds more than %d entries", path, w)
		}
	}
	return nil
}

func checkInclusion(c inclusion) error {
	leaf, err := base64.StdEncoding.DecodeString(c.Leaf)
	if err != nil {
		return err
	}
	p, err := decodeAll(c.Proof)
	if err != nil {
		return err
	}
	root, err := base64.StdEncoding.DecodeString(c.Root)
	if err != nil {
		return err
	}
	h := rfc6962.DefaultHasher
	return proof.VerifyInclusion(h, uint64(c.Index), uint64(c.Size), h.HashLeaf(leaf), p, root)
}

func checkConsistency(c consistency) error {
	p, err := decodeAll(c.Proof)
	if err != nil {
		return err
	}
	r1, err := base64.StdEncoding.DecodeString(c.OldRoot)
	if err != nil {
		return err
	}
	r2, err := base64.StdEncoding.DecodeString(c.NewRoot)
	if err != nil {
		return err
	}
	return proof.VerifyConsistency(rfc6962.DefaultHasher, uint64(c.Old), uint64(c.New), p, r1, r2)
}

func main() {
	var req request
	if err := json.NewDecoder(os.Stdin).Decode(&req); err != nil {
		fmt.Fprintln(os.Stderr, "tlogcheck:", err)
		os.Exit(2)
	}
	v, err := note.NewVerifier(req.Vkey)
	if err != nil {
		fmt.Fprintln(os.Stderr, "tlogcheck: verifier key:", err)
		os.Exit(2)
	}
	ans := answer{Checkpoints: []string{}, Inclusions: []string{}, Consistencies: []string{}}
	for _, c := range req.Checkpoints {
		ans.Checkpoints = append(ans.Checkpoints, result(checkCheckpoint(v, c)))
	}
	for _, c := range req.Inclusions {
		ans.Inclusions = append(ans.Inclusions, result(checkInclusion(c)))
	}
	for _, c := range req.Consistencies {
		ans.Consistencies = append(ans.Consistencies, result(checkConsistency(c)))
	}
	if err := json.NewEncoder(os.Stdout).Encode(ans); err != nil {
		os.Exit(2)
	}
}
