package clienttest

import (
	"encoding/json"
	"net/http"
	"strings"

	"github.com/corral-sandbox/corral/api/rest"
)

// Diff is what GET /v1/sandboxes/{id}/diff answers for one sandbox: the
// changes (format=list), the stat (format=stat) and the patch text
// (format=patch), whatever the query's filters.
type Diff struct {
	Changes []rest.Change
	Stat    rest.DiffStat
	Patch   string
}

func (d *Daemon) diffRoutes(mux *http.ServeMux) {
	mux.HandleFunc("GET /v1/sandboxes/{id}/diff", func(w http.ResponseWriter, r *http.Request) {
		sb := d.sandbox(w, r)
		if sb == nil {
			return
		}
		d.Mu.Lock()
		df := d.Diffs[sb.ID]
		d.DiffQueries = append(d.DiffQueries, r.URL.RawQuery)
		d.Mu.Unlock()
		switch r.URL.Query().Get("format") {
		case rest.DiffFormatList:
			w.Header().Set("Content-Type", "application/x-ndjson")
			enc := json.NewEncoder(w)
			for _, ch := range df.Changes {
				_ = enc.Encode(ch)
			}
		case rest.DiffFormatStat:
			writeJSON(w, http.StatusOK, df.Stat)
		case rest.DiffFormatPatch:
			w.Header().Set("Content-Type", "text/x-diff")
			_, _ = w.Write([]byte(df.Patch))
			if r.URL.Query().Get("stat") == "true" {
				b, _ := json.Marshal(df.Stat)
				_, _ = w.Write([]byte(rest.DiffStatLinePrefix + string(b) + "\n"))
			}
		default:
			writeError(w, http.StatusBadRequest, "invalid_argument", "format "+strings.TrimSpace(r.URL.Query().Get("format"))+": want list, patch or stat")
		}
	})
}
