package rest

// Diff formats of GET /v1/sandboxes/{id}/diff.
const (
	DiffFormatList  = "list"
	DiffFormatPatch = "patch"
	DiffFormatStat  = "stat"
)

// Trailers of GET /v1/sandboxes/{id}/diff: set when the stream failed
// after it started (the body is incomplete), and the number of files a
// patch left out for its size limits (it does not carry the whole
// change).
const (
	DiffErrorTrailer   = "Corral-Diff-Error"
	DiffOmittedTrailer = "Corral-Diff-Omitted"
)

// DiffStatLinePrefix starts the last line of a patch asked for with
// stat=true: the compact JSON of the DiffStat that format=stat answers,
// from the same walk. git apply ignores it, like the patch's other
// "# corral: " lines.
const DiffStatLinePrefix = "# corral: stat "

// Change is one changed path, a line of GET /v1/sandboxes/{id}/diff
// with format=list (application/x-ndjson).
type Change struct {
	// Kind is "A" (added), "C" (changed) or "D" (deleted), as docker diff
	// prints them.
	Kind string `json:"kind"`
	// Path is the path in the sandbox, absolute.
	Path string `json:"path"`
	// Type is the path's type now (before, when deleted): "file", "dir",
	// "symlink", "fifo", "socket", "char-device" or "block-device".
	Type string `json:"type"`
	// Size is a file's size in bytes now (before, when deleted).
	Size int64 `json:"size,omitempty"`
	// Mode is the permission bits now (before, when deleted).
	Mode uint32 `json:"mode"`
}

// DiffStat is the body of GET /v1/sandboxes/{id}/diff with format=stat:
// what a patch of the same request would change.
type DiffStat struct {
	Files        []FileStat `json:"files"`
	FilesChanged int        `json:"files_changed"`
	Insertions   int        `json:"insertions"`
	Deletions    int        `json:"deletions"`
	// Notes are the paths a patch would leave out (omitted: over a size
	// limit) or cannot hold (a device, a fifo, a socket).
	Notes []DiffNote `json:"notes,omitempty"`
}

// FileStat is one file of a DiffStat. Paths are relative to the compared
// directory, as in the patch.
type FileStat struct {
	Path       string `json:"path"`
	Insertions int    `json:"insertions"`
	Deletions  int    `json:"deletions"`
	Binary     bool   `json:"binary,omitempty"`
	OldSize    int64  `json:"old_size"`
	NewSize    int64  `json:"new_size"`
	// ModeOnly is set when only the executable bit changed.
	ModeOnly bool `json:"mode_only,omitempty"`
}

// DiffNote is a path a patch leaves out or cannot hold.
type DiffNote struct {
	Path   string `json:"path"`
	Reason string `json:"reason"`
	// Omitted is set when the patch leaves the file out for a size limit:
	// then it does not carry the whole change.
	Omitted bool `json:"omitted,omitempty"`
}
