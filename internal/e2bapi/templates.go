package e2bapi

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/containerd/errdefs"

	"github.com/corral-sandbox/corral/internal/archive"
	"github.com/corral-sandbox/corral/internal/build"
	"github.com/corral-sandbox/corral/internal/httpapi"
	"github.com/corral-sandbox/corral/internal/identifiers"
	"github.com/corral-sandbox/corral/internal/log"
	"github.com/corral-sandbox/corral/internal/sandbox"
	"github.com/corral-sandbox/corral/internal/spec"
)

// Template builds (the SDKs' Template.build): POST /v3/templates names the
// template and answers a build ID; GET /templates/{id}/files/{hash} answers
// whether a COPY step's files are there and, if not, a URL of the daemon's
// own to PUT their tar to; POST /v2/templates/{id}/builds/{buildID} starts
// the build with the steps; GET .../status is polled for its logs and end.
// The steps become a corral.yaml spec that internal/build builds, so a
// template is an image like any other, cached step by step.

// Builder builds an image from a spec (*build.Builder).
type Builder interface {
	Build(ctx context.Context, o build.Options) (sandbox.Image, error)
}

// TemplateImages is what template builds need from the image store
// (*image.Store).
type TemplateImages interface {
	Get(ctx context.Context, name string) (sandbox.Image, error)
	Tag(ctx context.Context, src, dst string) (sandbox.Image, error)
	Remove(ctx context.Context, name string) error
}

// Template defaults, E2B's: steps run as, and sandboxes default to, the
// user "user" in its home directory.
const (
	templateUser    = "user"
	templateWorkdir = "/home/user"
	// templateSpecFile is the spec name built templates record: what
	// tells them apart from other images.
	templateSpecFile = "e2b template"
	// maxUpload bounds one uploaded tar of a COPY step's files.
	maxUpload = 8 << 30
	// uploadValidity is how long an upload URL works.
	uploadValidity = time.Hour
	// maxLogEntries bounds the log kept of one build.
	maxLogEntries = 20000
	// maxBuilds bounds the finished builds kept in memory (for their
	// logs); records on disk keep the last maxRecordBuilds of each
	// template.
	maxBuilds       = 64
	maxRecordBuilds = 20
)

// Build statuses.
const (
	statusWaiting  = "waiting"
	statusBuilding = "building"
	statusReady    = "ready"
	statusError    = "error"
)

var hashRe = regexp.MustCompile(`^[A-Za-z0-9_-]{1,128}$`)

// templateRecord is what the daemon keeps of a template built through the
// E2B API, in TemplateDir/NAME/template.json.
type templateRecord struct {
	Name     string        `json:"name"`
	Created  time.Time     `json:"created"`
	Tags     []string      `json:"tags,omitempty"`
	CPUs     float64       `json:"cpus,omitempty"`
	MemoryMB int64         `json:"memory_mb,omitempty"`
	Builds   []buildRecord `json:"builds"`
	// Start holds the start and ready commands of the image of each tag
	// ("default": the template's name without a tag) that has them.
	Start map[string]startCommands `json:"start,omitempty"`
}

// startCommands are what E2B's setStartCmd and setReadyCmd give a
// template: a command that runs in each sandbox made from it, and one
// that tells when the sandbox is ready (exit code 0).
type startCommands struct {
	Start string `json:"start,omitempty"`
	Ready string `json:"ready,omitempty"`
}

type buildRecord struct {
	ID       string     `json:"id"`
	Status   string     `json:"status"`
	Created  time.Time  `json:"created"`
	Updated  time.Time  `json:"updated"`
	Finished *time.Time `json:"finished,omitempty"`
}

// templateBuild is a build in memory: its status and log.
type templateBuild struct {
	id, template string
	created      time.Time
	spec         spec.Resources
	tags         []string

	mu      sync.Mutex
	status  string
	entries []buildLogEntry
	reason  *statusReason
	// partial holds the unfinished last line of each output stream.
	partial map[string]string
	// started is set by the first step.
	started bool
}

// buildLogEntry is E2B's BuildLogEntry.
type buildLogEntry struct {
	Timestamp time.Time `json:"timestamp"`
	Message   string    `json:"message"`
	Level     string    `json:"level"`
	Step      string    `json:"step,omitempty"`
}

// statusReason is E2B's BuildStatusReason.
type statusReason struct {
	Message    string          `json:"message"`
	Step       string          `json:"step,omitempty"`
	LogEntries []buildLogEntry `json:"logEntries"`
}

// templates is the API's template build state.
type templates struct {
	mu     sync.Mutex
	builds map[string]*templateBuild
	order  []string // build IDs, oldest first
}

func (a *API) templateRoutes(r map[string]http.HandlerFunc) {
	r["POST /v3/templates"] = a.requestBuild
	r["GET /templates/{id}/files/{hash}"] = a.fileUploadLink
	r["PUT /templates/{id}/files/{hash}"] = a.uploadFile
	r["POST /v2/templates/{id}/builds/{buildID}"] = a.startBuild
	r["GET /templates/{id}/builds/{buildID}/status"] = a.buildStatus
	r["GET /templates"] = a.listTemplates
	r["GET /v2/templates"] = a.listTemplates
	r["GET /templates/{id}"] = a.getTemplate
	r["GET /templates/aliases/{alias}"] = a.templateAlias
	r["POST /templates/tags"] = a.assignTags
	r["DELETE /templates/tags"] = a.removeTags
}

// assignTagsRequest is E2B's AssignTemplateTagsRequest; removeTagsRequest
// its DeleteTemplateTagsRequest; assignedTags its AssignedTemplateTags.
type (
	assignTagsRequest struct {
		Target string   `json:"target"`
		Tags   []string `json:"tags"`
	}
	removeTagsRequest struct {
		Name string   `json:"name"`
		Tags []string `json:"tags"`
	}
	assignedTags struct {
		BuildID string   `json:"buildID"`
		Tags    []string `json:"tags"`
	}
)

// checkTags checks the tags of a tags request on template name.
func checkTags(name string, tags []string) error {
	if len(tags) == 0 {
		return fmt.Errorf("tags: name at least one tag: %w", errdefs.ErrInvalidArgument)
	}
	for _, t := range tags {
		if _, _, err := splitName(name + ":" + t); err != nil || t == "" || strings.Contains(t, ":") {
			return fmt.Errorf("tags: %q is not a valid tag: %w", t, errdefs.ErrInvalidArgument)
		}
	}
	return nil
}

// assignTags is POST /templates/tags (Template.assignTags): each tag
// becomes the image name NAME:TAG of the image target ("NAME:TAG" or
// "NAME") names, with that image's start commands; "default" moves the
// template's own name. Only templates built through the E2B API take
// tags (corral image tag names any image).
func (a *API) assignTags(w http.ResponseWriter, r *http.Request) {
	if err := a.templatesOn(); err != nil {
		a.fail(w, r, err)
		return
	}
	var req assignTagsRequest
	if err := decode(w, r, &req); err != nil {
		a.fail(w, r, err)
		return
	}
	name, src, err := splitName(req.Target)
	if err == nil && req.Target == "" {
		err = fmt.Errorf("target is required: name the template as NAME:TAG: %w", errdefs.ErrInvalidArgument)
	}
	if err == nil {
		err = checkTags(name, req.Tags)
	}
	if err != nil {
		a.fail(w, r, err)
		return
	}
	src = cmp.Or(src, "default")
	a.recordMu.Lock()
	defer a.recordMu.Unlock()
	rec, err := a.readRecord(name)
	if err != nil {
		a.fail(w, r, fmt.Errorf("target %q: %w", req.Target, err))
		return
	}
	if src != "default" && !slices.Contains(rec.Tags, src) {
		a.fail(w, r, fmt.Errorf("target %q: template %s has no tag %s: %w", req.Target, name, src, errdefs.ErrNotFound))
		return
	}
	if _, err := a.cfg.TemplateImages.Get(r.Context(), imageOf(name, src)); err != nil {
		a.fail(w, r, fmt.Errorf("target %q: %w", req.Target, err))
		return
	}
	out := assignedTags{BuildID: lastReady(rec), Tags: []string{}}
	sc, hasStart := rec.Start[src]
	for _, t := range req.Tags {
		if t == src {
			out.Tags = append(out.Tags, t)
			continue
		}
		if _, err := a.cfg.TemplateImages.Tag(r.Context(), imageOf(name, src), imageOf(name, t)); err != nil {
			a.fail(w, r, fmt.Errorf("tag %s: %w", t, err))
			return
		}
		if t != "default" && !slices.Contains(rec.Tags, t) {
			rec.Tags = append(rec.Tags, t)
		}
		delete(rec.Start, t)
		if hasStart {
			rec.Start[t] = sc
		}
		out.Tags = append(out.Tags, t)
	}
	if err := a.writeRecord(rec); err != nil {
		a.fail(w, r, fmt.Errorf("template %s: record: %w", name, err))
		return
	}
	writeJSON(w, http.StatusCreated, out)
}

// removeTags is DELETE /templates/tags (Template.removeTags): it removes
// the images NAME:TAG. The template's own name ("default") is removed
// with DELETE /templates/{id} only.
func (a *API) removeTags(w http.ResponseWriter, r *http.Request) {
	if err := a.templatesOn(); err != nil {
		a.fail(w, r, err)
		return
	}
	var req removeTagsRequest
	if err := decode(w, r, &req); err != nil {
		a.fail(w, r, err)
		return
	}
	name, tag, err := splitName(req.Name)
	switch {
	case err != nil:
	case req.Name == "" || tag != "":
		err = fmt.Errorf("name %q: name the template without a tag: %w", req.Name, errdefs.ErrInvalidArgument)
	case slices.Contains(req.Tags, "default"):
		err = fmt.Errorf("tags: default is the template itself: remove it with DELETE /templates/%s: %w", name, errdefs.ErrInvalidArgument)
	default:
		err = checkTags(name, req.Tags)
	}
	if err != nil {
		a.fail(w, r, err)
		return
	}
	a.recordMu.Lock()
	defer a.recordMu.Unlock()
	rec, err := a.readRecord(name)
	if err != nil {
		a.fail(w, r, err)
		return
	}
	for _, t := range req.Tags {
		if !slices.Contains(rec.Tags, t) {
			a.fail(w, r, fmt.Errorf("template %s has no tag %s: %w", name, t, errdefs.ErrNotFound))
			return
		}
	}
	for _, t := range req.Tags {
		if err := a.cfg.TemplateImages.Remove(r.Context(), imageOf(name, t)); err != nil && !errdefs.IsNotFound(err) {
			a.fail(w, r, fmt.Errorf("tag %s: %w", t, err))
			return
		}
		rec.Tags = slices.DeleteFunc(rec.Tags, func(x string) bool { return x == t })
		delete(rec.Start, t)
	}
	if err := a.writeRecord(rec); err != nil {
		a.fail(w, r, fmt.Errorf("template %s: record: %w", name, err))
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// imageOf is the image name of template name's tag ("default": name).
func imageOf(name, tag string) string {
	if tag == "" || tag == "default" {
		return name
	}
	return name + ":" + tag
}

// lastReady is the ID of the last build of rec that is ready.
func lastReady(rec templateRecord) string {
	for _, b := range slices.Backward(rec.Builds) {
		if b.Status == statusReady {
			return b.ID
		}
	}
	return ""
}

func (a *API) templatesOn() error {
	if a.cfg.Builder == nil || a.cfg.TemplateImages == nil || a.cfg.TemplateDir == "" {
		return fmt.Errorf("template builds: this daemon does not build templates: %w", errdefs.ErrNotImplemented)
	}
	return nil
}

// templateDir is where the record and uploaded files of template name
// live. Names are image names without a '/' (checked at the edge), so
// they are one path component.
func (a *API) templateDir(name string) string { return filepath.Join(a.cfg.TemplateDir, name) }

func (a *API) readRecord(name string) (templateRecord, error) {
	var rec templateRecord
	if strings.ContainsAny(name, "/\\") || name == "." || name == ".." {
		return rec, fmt.Errorf("template %q: %w", name, errdefs.ErrNotFound)
	}
	b, err := os.ReadFile(filepath.Join(a.templateDir(name), "template.json"))
	if errors.Is(err, os.ErrNotExist) {
		return rec, fmt.Errorf("template %q was not built through the E2B API: %w", name, errdefs.ErrNotFound)
	}
	if err != nil {
		return rec, err
	}
	if err := json.Unmarshal(b, &rec); err != nil {
		return rec, fmt.Errorf("template %q: read its record: %w", name, err)
	}
	return rec, nil
}

func (a *API) writeRecord(rec templateRecord) error {
	dir := a.templateDir(rec.Name)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	b, err := json.MarshalIndent(rec, "", "  ")
	if err != nil {
		return err
	}
	tmp := filepath.Join(dir, ".template.json.tmp")
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, filepath.Join(dir, "template.json"))
}

// updateBuild sets the status of build id in template name's record.
func (a *API) updateBuild(name, id, status string) error {
	a.recordMu.Lock()
	defer a.recordMu.Unlock()
	rec, err := a.readRecord(name)
	if err != nil {
		return err
	}
	now := a.cfg.Now().UTC()
	for i := range rec.Builds {
		if rec.Builds[i].ID == id {
			rec.Builds[i].Status, rec.Builds[i].Updated = status, now
			if status == statusReady || status == statusError {
				rec.Builds[i].Finished = &now
			}
		}
	}
	return a.writeRecord(rec)
}

// templateRequest is E2B's TemplateBuildRequestV3.
type templateRequest struct {
	Name          string   `json:"name"`
	Alias         string   `json:"alias"`
	Tags          []string `json:"tags"`
	CPUCount      *float64 `json:"cpuCount"`
	MemoryMB      *int64   `json:"memoryMB"`
	MinFreeDiskMB *int64   `json:"minFreeDiskMb"`
}

// templateRequested is E2B's TemplateRequestResponseV3.
type templateRequested struct {
	TemplateID string   `json:"templateID"`
	BuildID    string   `json:"buildID"`
	Public     bool     `json:"public"`
	Names      []string `json:"names"`
	Tags       []string `json:"tags"`
	Aliases    []string `json:"aliases"`
}

// splitName checks an E2B template name ("name" or "name:tag") and
// returns the name (the template's ID and image name) and its tag.
func splitName(full string) (string, string, error) {
	n, tag, _ := strings.Cut(full, ":")
	if strings.Contains(n, "/") {
		return "", "", fmt.Errorf("name %q: Corral's templates have no namespace: give a name without '/': %w", full, errdefs.ErrInvalidArgument)
	}
	if msg := identifiers.ImageNameProblem(n); msg != "" {
		return "", "", fmt.Errorf("name %q: %s: %w", full, msg, errdefs.ErrInvalidArgument)
	}
	if tag != "" {
		if msg := identifiers.ImageNameProblem(n + ":" + tag); msg != "" {
			return "", "", fmt.Errorf("tag %q: %s: %w", tag, msg, errdefs.ErrInvalidArgument)
		}
	}
	return n, tag, nil
}

func newBuildID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	b[6] = b[6]&0x0f | 0x40 // a version 4 UUID, as E2B's build IDs are
	b[8] = b[8]&0x3f | 0x80
	h := hex.EncodeToString(b[:])
	return h[:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:]
}

// requestBuild is POST /v3/templates: it names the template and makes a
// build that waits for its steps.
func (a *API) requestBuild(w http.ResponseWriter, r *http.Request) {
	if err := a.templatesOn(); err != nil {
		a.fail(w, r, err)
		return
	}
	var req templateRequest
	if err := decode(w, r, &req); err != nil {
		a.fail(w, r, err)
		return
	}
	full := cmp.Or(req.Name, req.Alias)
	if full == "" {
		a.fail(w, r, fmt.Errorf("name is required: %w", errdefs.ErrInvalidArgument))
		return
	}
	name, tag, err := splitName(full)
	if err != nil {
		a.fail(w, r, err)
		return
	}
	var tags []string
	if tag != "" && tag != "default" {
		tags = append(tags, tag)
	}
	for _, t := range req.Tags {
		if _, _, err := splitName(name + ":" + t); err != nil || t == "" {
			a.fail(w, r, fmt.Errorf("tags: %q is not a valid tag: %w", t, errdefs.ErrInvalidArgument))
			return
		}
		if t != "default" && !slices.Contains(tags, t) {
			tags = append(tags, t)
		}
	}
	var res spec.Resources
	if req.CPUCount != nil {
		if *req.CPUCount <= 0 || *req.CPUCount > spec.MaxCPUs {
			a.fail(w, r, fmt.Errorf("cpuCount %v must be between 1 and %d: %w", *req.CPUCount, spec.MaxCPUs, errdefs.ErrInvalidArgument))
			return
		}
		res.CPUs = *req.CPUCount
	}
	if req.MemoryMB != nil {
		if *req.MemoryMB < spec.MinMemory>>20 {
			a.fail(w, r, fmt.Errorf("memoryMB %d must be at least %d: %w", *req.MemoryMB, spec.MinMemory>>20, errdefs.ErrInvalidArgument))
			return
		}
		res.Memory = *req.MemoryMB << 20
	}
	a.recordMu.Lock()
	rec, err := a.readRecord(name)
	if errdefs.IsNotFound(err) {
		if _, gerr := a.cfg.TemplateImages.Get(r.Context(), name); gerr == nil {
			a.recordMu.Unlock()
			a.fail(w, r, fmt.Errorf("name %q is a Corral image not built through the E2B API: choose another name, or remove it with corral image rm %s: %w", name, name, errdefs.ErrAlreadyExists))
			return
		}
		rec, err = templateRecord{Name: name, Created: a.cfg.Now().UTC()}, nil
	}
	if err != nil {
		a.recordMu.Unlock()
		a.fail(w, r, err)
		return
	}
	now := a.cfg.Now().UTC()
	id := newBuildID()
	// Tags stay with the images of the builds that made them: the record
	// keeps every tag, for DELETE.
	for _, t := range tags {
		if !slices.Contains(rec.Tags, t) {
			rec.Tags = append(rec.Tags, t)
		}
	}
	rec.CPUs, rec.MemoryMB = res.CPUs, res.Memory>>20
	rec.Builds = append(rec.Builds, buildRecord{ID: id, Status: statusWaiting, Created: now, Updated: now})
	if n := len(rec.Builds); n > maxRecordBuilds {
		rec.Builds = rec.Builds[n-maxRecordBuilds:]
	}
	err = a.writeRecord(rec)
	a.recordMu.Unlock()
	if err != nil {
		a.fail(w, r, fmt.Errorf("template %s: record: %w", name, err))
		return
	}
	a.tmpl.add(&templateBuild{id: id, template: name, created: now, spec: res, tags: tags, status: statusWaiting})
	writeJSON(w, http.StatusAccepted, templateRequested{
		TemplateID: name, BuildID: id, Names: []string{name}, Aliases: []string{name}, Tags: append([]string{}, tags...),
	})
}

func (t *templates) add(b *templateBuild) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.builds == nil {
		t.builds = map[string]*templateBuild{}
	}
	t.builds[b.id] = b
	t.order = append(t.order, b.id)
	// Forget the oldest finished builds past the bound.
	for len(t.order) > maxBuilds {
		i := slices.IndexFunc(t.order, func(id string) bool {
			b := t.builds[id]
			b.mu.Lock()
			defer b.mu.Unlock()
			return b.status == statusReady || b.status == statusError
		})
		if i < 0 {
			break
		}
		delete(t.builds, t.order[i])
		t.order = slices.Delete(t.order, i, i+1)
	}
}

func (t *templates) get(template, id string) (*templateBuild, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	b, ok := t.builds[id]
	if !ok || b.template != template {
		return nil, fmt.Errorf("build %s of template %s: %w", id, template, errdefs.ErrNotFound)
	}
	return b, nil
}

// fileUpload is E2B's TemplateBuildFileUpload.
type fileUpload struct {
	Present bool    `json:"present"`
	URL     *string `json:"url,omitempty"`
}

// filePath checks the template and hash of a files route and returns
// where those files are kept.
func (a *API) filePath(r *http.Request) (string, error) {
	if err := a.templatesOn(); err != nil {
		return "", err
	}
	id, hash := r.PathValue("id"), r.PathValue("hash")
	if !hashRe.MatchString(hash) {
		return "", fmt.Errorf("files hash %q: want letters, digits, '-' and '_' (at most 128): %w", hash, errdefs.ErrInvalidArgument)
	}
	if _, err := a.readRecord(id); err != nil {
		return "", err
	}
	return filepath.Join(a.templateDir(id), "files", hash), nil
}

// fileUploadLink is GET /templates/{id}/files/{hash}: whether a COPY
// step's files are there, and where to PUT their tar when they are not.
// The URL is the daemon's own, signed with the caller's token (see
// httpapi.SignUpload), as the SDK sends no credential with the PUT.
func (a *API) fileUploadLink(w http.ResponseWriter, r *http.Request) {
	p, err := a.filePath(r)
	if err != nil {
		a.fail(w, r, err)
		return
	}
	if _, err := os.Stat(p); err == nil {
		writeJSON(w, http.StatusCreated, fileUpload{Present: true})
		return
	}
	scheme := "http"
	if r.TLS != nil {
		scheme = "https"
	}
	u := scheme + "://" + r.Host + r.URL.EscapedPath()
	if tok := httpapi.CallerToken(r); tok != "" {
		u += "?" + httpapi.SignUpload(r.URL.Path, a.cfg.Now().Add(uploadValidity), tok)
	}
	writeJSON(w, http.StatusCreated, fileUpload{URL: &u})
}

// uploadFile is PUT /templates/{id}/files/{hash}: the tar (plain or gzip)
// of a COPY step's files, kept until the template is deleted.
func (a *API) uploadFile(w http.ResponseWriter, r *http.Request) {
	p, err := a.filePath(r)
	if err != nil {
		a.fail(w, r, err)
		return
	}
	if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
		a.fail(w, r, err)
		return
	}
	f, err := os.CreateTemp(filepath.Dir(p), ".upload-*")
	if err != nil {
		a.fail(w, r, err)
		return
	}
	defer os.Remove(f.Name()) // after the rename, a no-op
	_, err = io.Copy(f, http.MaxBytesReader(w, r.Body, maxUpload))
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	var tooBig *http.MaxBytesError
	if errors.As(err, &tooBig) {
		err = fmt.Errorf("upload is larger than %d GiB: %w", maxUpload>>30, errdefs.ErrInvalidArgument)
	}
	if err == nil {
		err = os.Rename(f.Name(), p)
	}
	if err != nil {
		a.fail(w, r, fmt.Errorf("upload files %s: %w", filepath.Base(p), err))
		return
	}
	w.WriteHeader(http.StatusOK)
}

// templateStart is E2B's TemplateBuildStartV2.
type templateStart struct {
	FromImage         string          `json:"fromImage"`
	FromTemplate      string          `json:"fromTemplate"`
	FromImageRegistry json.RawMessage `json:"fromImageRegistry"`
	Force             bool            `json:"force"`
	Steps             []templateStep  `json:"steps"`
	StartCmd          string          `json:"startCmd"`
	ReadyCmd          string          `json:"readyCmd"`
}

// templateStep is E2B's TemplateStep.
type templateStep struct {
	Type      string   `json:"type"`
	Args      []string `json:"args"`
	FilesHash string   `json:"filesHash"`
	Force     bool     `json:"force"`
}

// planned is a template's build: the spec, and for each of its build
// steps the E2B step it comes from ("base" or a 1-based step index).
type planned struct {
	spec   *spec.Spec
	start  startCommands
	origin []string
	// hashes are the uploaded files the COPY steps need.
	hashes []string
}

// plan turns the steps of a template build into a spec whose copy sources
// are DIR/HASH/SRC in the build context (where each uploaded tar is
// extracted). ENV sets the environment of every step and sandbox (as in
// corral.yaml, not only of later steps); USER makes the user when it is
// missing; WORKDIR makes the directory; a relative COPY destination is
// taken from the WORKDIR. The last USER and WORKDIR are the sandboxes'
// defaults (E2B's "user" and "/home/user" when none is given).
func plan(name string, t templateStart, res spec.Resources, lookup func(string) (sandbox.Image, bool)) (*planned, error) {
	fromLocal := func(n string) bool { _, ok := lookup(n); return ok }
	sp := &spec.Spec{Name: name, Resources: res, Env: map[string]string{}}
	switch {
	case len(t.FromImageRegistry) > 0 && string(t.FromImageRegistry) != "null":
		return nil, fmt.Errorf("fromImageRegistry: registry credentials are not supported: pull the image with corral pull (the daemon's registry settings apply) and name it in fromImage: %w", errdefs.ErrInvalidArgument)
	case t.FromTemplate != "":
		if !fromLocal(t.FromTemplate) {
			return nil, fmt.Errorf("fromTemplate %q: no such template (corral image ls lists them): %w", t.FromTemplate, errdefs.ErrNotFound)
		}
		sp.From = t.FromTemplate
	case t.FromImage == "":
		return nil, fmt.Errorf("fromImage or fromTemplate is required: %w", errdefs.ErrInvalidArgument)
	default:
		sp.From = fromImage(t.FromImage, fromLocal)
		if sp.From == BaseTemplate && !fromLocal(BaseTemplate) {
			return nil, fmt.Errorf("fromImage %q is E2B's base image: Corral's is the base template, which is not built yet: run corral e2b setup: %w", t.FromImage, errdefs.ErrNotFound)
		}
	}
	// E2B's templates all have sudo: one built on a Corral image keeps
	// that image's allow_privilege_escalation (the base template's is on).
	if img, ok := lookup(strings.TrimPrefix(sp.From, "docker://")); ok {
		sp.AllowPrivilegeEscalation = img.AllowPrivilegeEscalation
	}
	p := &planned{spec: sp, start: startCommands{Start: t.StartCmd, Ready: t.ReadyCmd}}
	add := func(origin string, st spec.Step) {
		sp.Steps = append(sp.Steps, st)
		p.origin = append(p.origin, origin)
	}
	user, wd := templateUser, templateWorkdir
	add("base", spec.Step{Kind: spec.KindRun, Run: ensureUser(user)})
	for i, st := range t.Steps {
		n := strconv.Itoa(i + 1)
		arg := func(j int) string {
			if j < len(st.Args) {
				return st.Args[j]
			}
			return ""
		}
		bad := func(format string, args ...any) error {
			return fmt.Errorf("steps[%d] (%s): %s: %w", i, st.Type, fmt.Sprintf(format, args...), errdefs.ErrInvalidArgument)
		}
		switch strings.ToUpper(st.Type) {
		case "RUN":
			if arg(0) == "" {
				return nil, bad("no command")
			}
			add(n, spec.Step{Kind: spec.KindRun, Run: arg(0), User: cmp.Or(arg(1), user), Workdir: wd})
		case "ENV":
			if len(st.Args)%2 != 0 {
				return nil, bad("want name and value pairs, got %d arguments", len(st.Args))
			}
			for j := 0; j < len(st.Args); j += 2 {
				sp.Env[st.Args[j]] = st.Args[j+1]
			}
		case "WORKDIR":
			if arg(0) == "" {
				return nil, bad("no directory")
			}
			wd = path.Join(wd, arg(0)) // an absolute one replaces wd
			if strings.HasPrefix(arg(0), "/") {
				wd = path.Clean(arg(0))
			}
			add(n, spec.Step{Kind: spec.KindRun, Run: makeDir(wd, user)})
		case "USER":
			if arg(0) == "" {
				return nil, bad("no user")
			}
			user = arg(0)
			if s := ensureUser(user); s != "" {
				add(n, spec.Step{Kind: spec.KindRun, Run: s})
			}
		case "COPY":
			if arg(0) == "" || arg(1) == "" {
				return nil, bad("want a source and a destination")
			}
			if !hashRe.MatchString(st.FilesHash) {
				return nil, bad("filesHash %q: want the hash the files were uploaded under", st.FilesHash)
			}
			src := archive.Clean(arg(0))
			if src == "" {
				src = "."
			}
			dst := arg(1)
			if !strings.HasPrefix(dst, "/") {
				dst = path.Join(wd, dst)
				if strings.HasSuffix(arg(1), "/") {
					dst += "/"
				}
			}
			owner := cmp.Or(arg(2), user)
			if owner == "root" {
				owner = ""
			}
			add(n, spec.Step{Kind: spec.KindCopy, Copy: &spec.Copy{Src: st.FilesHash + "/" + src, Dst: dst, Owner: owner, Mode: arg(3)}})
			if !slices.Contains(p.hashes, st.FilesHash) {
				p.hashes = append(p.hashes, st.FilesHash)
			}
		default:
			return nil, bad("not a step Corral's template builds take: they take COPY, ENV, RUN, USER and WORKDIR")
		}
	}
	sp.User, sp.Workdir = user, wd
	if user == "root" {
		sp.User = ""
	}
	if err := sp.Validate(); err != nil {
		return nil, fmt.Errorf("template: %w: %w", err, errdefs.ErrInvalidArgument)
	}
	return p, nil
}

// fromImage maps an E2B fromImage onto a spec's from: E2B's base image is
// Corral's base template, a name Corral has is that image, anything else
// is pulled.
func fromImage(ref string, fromLocal func(string) bool) string {
	if n, _, _ := strings.Cut(ref, ":"); n == "e2bdev/base" || n == "docker.io/e2bdev/base" {
		return BaseTemplate
	}
	if fromLocal(ref) {
		return ref
	}
	return "docker://" + ref
}

// ensureUser is a script that makes user unless it exists ("" for root
// and numeric users).
func ensureUser(user string) string {
	if user == "root" || strings.Trim(user, "0123456789") == "" {
		return ""
	}
	return build.UserScript(user)
}

// makeDir is a script that makes dir, owned by user, unless it exists.
func makeDir(dir, user string) string {
	q := shellQuote(dir)
	s := "[ -d " + q + " ] || { mkdir -p " + q
	if user != "root" {
		s += " && chown " + shellQuote(user) + " " + q
	}
	return s + "; }"
}

func shellQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

// startBuild is POST /v2/templates/{id}/builds/{buildID}: it checks the
// steps and starts the build, which runs on after the answer.
func (a *API) startBuild(w http.ResponseWriter, r *http.Request) {
	if err := a.templatesOn(); err != nil {
		a.fail(w, r, err)
		return
	}
	b, err := a.tmpl.get(r.PathValue("id"), r.PathValue("buildID"))
	if err != nil {
		a.fail(w, r, err)
		return
	}
	var t templateStart
	if err := decode(w, r, &t); err != nil {
		a.fail(w, r, err)
		return
	}
	ctx := a.cfg.Context
	if ctx == nil {
		ctx = context.WithoutCancel(r.Context())
	}
	p, err := plan(b.template, t, b.spec, func(name string) (sandbox.Image, bool) {
		img, err := a.cfg.TemplateImages.Get(ctx, name)
		return img, err == nil
	})
	if err != nil {
		a.fail(w, r, err)
		return
	}
	for _, h := range p.hashes {
		if _, err := os.Stat(filepath.Join(a.templateDir(b.template), "files", h)); err != nil {
			a.fail(w, r, fmt.Errorf("filesHash %s: no files uploaded under it (GET /templates/%s/files/%s answers where to): %w", h, b.template, h, errdefs.ErrInvalidArgument))
			return
		}
	}
	force := t.Force || slices.ContainsFunc(t.Steps, func(s templateStep) bool { return s.Force })
	b.mu.Lock()
	if b.status != statusWaiting {
		st := b.status
		b.mu.Unlock()
		a.fail(w, r, fmt.Errorf("build %s is %s, not waiting for its steps: %w", b.id, st, errdefs.ErrFailedPrecondition))
		return
	}
	b.status = statusBuilding
	b.mu.Unlock()
	if err := a.updateBuild(b.template, b.id, statusBuilding); err != nil {
		log.G(ctx).Warn("record template build", "template", b.template, "build", b.id, "error", err)
	}
	go a.runBuild(ctx, b, p, force)
	w.WriteHeader(http.StatusAccepted)
}

// runBuild extracts the uploaded files into a build context, builds the
// spec and tags the image with the template's tags.
func (a *API) runBuild(ctx context.Context, b *templateBuild, p *planned, force bool) {
	ctx = log.With(ctx, "template", b.template, "build", b.id)
	err := a.build(ctx, b, p, force)
	status := statusReady
	if err != nil {
		status = statusError
		reason := &statusReason{Message: err.Error()}
		var se *build.StepError
		b.mu.Lock()
		switch {
		case errors.As(err, &se) && se.Step >= 1 && se.Step <= len(p.origin):
			reason.Step = p.origin[se.Step-1]
		case !b.started:
			reason.Step = "base" // the base image, before any step
		}
		b.flush()
		b.append(buildLogEntry{Timestamp: a.cfg.Now().UTC(), Level: "error", Message: err.Error(), Step: reason.Step})
		reason.LogEntries = slices.Clone(b.entries[max(0, len(b.entries)-10):])
		b.reason = reason
		b.mu.Unlock()
		log.G(ctx).Info("template build failed", "error", err)
	}
	b.mu.Lock()
	b.flush()
	b.status = status
	b.mu.Unlock()
	if err := a.updateBuild(b.template, b.id, status); err != nil {
		log.G(ctx).Warn("record template build", "error", err)
	}
}

func (a *API) build(ctx context.Context, b *templateBuild, p *planned, force bool) error {
	dir, err := os.MkdirTemp(a.cfg.TemplateDir, ".context-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	root, err := os.OpenRoot(dir)
	if err != nil {
		return err
	}
	defer root.Close()
	for _, h := range p.hashes {
		if err := a.extract(ctx, root, h, b.template); err != nil {
			return err
		}
	}
	if err := expandGlobs(root, p); err != nil {
		return err
	}
	p.spec.Dir = dir
	// The build numbers its steps from 1, after a first step that makes
	// the spec's user and workdir when it has them (the template's base).
	if p.spec.User != "" || p.spec.Workdir != "" {
		p.origin = append([]string{"base"}, p.origin...)
	}
	_, err = a.cfg.Builder.Build(ctx, build.Options{
		Spec: p.spec, SpecFile: templateSpecFile, NoCache: force,
		Events: func(ev build.Event) { b.event(a.cfg.Now().UTC(), ev, p.origin) },
	})
	if err != nil {
		return err
	}
	for _, t := range b.tags {
		if _, err := a.cfg.TemplateImages.Tag(ctx, b.template, b.template+":"+t); err != nil {
			return fmt.Errorf("tag %s: %w", t, err)
		}
	}
	return a.setStart(b.template, append([]string{"default"}, b.tags...), p.start)
}

// setStart records the start commands of the images of template name's
// tags (none clears them).
func (a *API) setStart(name string, tags []string, sc startCommands) error {
	a.recordMu.Lock()
	defer a.recordMu.Unlock()
	rec, err := a.readRecord(name)
	if err != nil {
		return err
	}
	for _, t := range tags {
		if sc == (startCommands{}) {
			delete(rec.Start, t)
			continue
		}
		if rec.Start == nil {
			rec.Start = map[string]startCommands{}
		}
		rec.Start[t] = sc
	}
	return a.writeRecord(rec)
}

// extract unpacks the uploaded tar of hash into root/hash.
func (a *API) extract(ctx context.Context, root *os.Root, hash, template string) error {
	f, err := os.Open(filepath.Join(a.templateDir(template), "files", hash))
	if err != nil {
		return fmt.Errorf("files %s: %w", hash, err)
	}
	defer f.Close()
	if err := root.Mkdir(hash, 0o755); err != nil {
		return err
	}
	sub, err := root.OpenRoot(hash)
	if err != nil {
		return err
	}
	defer sub.Close()
	if _, err := archive.Apply(ctx, sub, f, archive.Options{}); err != nil {
		return fmt.Errorf("files %s: %w", hash, err)
	}
	return nil
}

// expandGlobs replaces each copy step whose source is a pattern (E2B's
// copy takes globs) with a copy of each file it matches, into the
// destination directory.
func expandGlobs(root *os.Root, p *planned) error {
	var steps []spec.Step
	var origin []string
	for i, st := range p.spec.Steps {
		if st.Kind != spec.KindCopy || !strings.ContainsAny(st.Copy.Src, "*?[") {
			steps, origin = append(steps, st), append(origin, p.origin[i])
			continue
		}
		// fs.Glob on root's FS: the matches are root's own names.
		matches, err := fs.Glob(root.FS(), st.Copy.Src)
		if err != nil {
			return err
		}
		if len(matches) == 0 {
			return fmt.Errorf("step %s: copy %s: matches no uploaded file: %w", p.origin[i], st.Copy.Src, errdefs.ErrInvalidArgument)
		}
		dst := st.Copy.Dst
		if len(matches) > 1 && !strings.HasSuffix(dst, "/") {
			dst += "/"
		}
		for _, m := range matches {
			c := *st.Copy
			c.Src, c.Dst = m, dst
			steps, origin = append(steps, spec.Step{Kind: spec.KindCopy, Copy: &c}), append(origin, p.origin[i])
		}
	}
	p.spec.Steps, p.origin = steps, origin
	return nil
}

// event turns a build event into log entries.
func (b *templateBuild) event(now time.Time, ev build.Event, origin []string) {
	step := ""
	if ev.Step >= 1 && ev.Step <= len(origin) {
		step = origin[ev.Step-1]
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	switch ev.Type {
	case "step":
		b.started = true
		b.flush()
		msg := fmt.Sprintf("[%d/%d] %s", ev.Step, ev.Steps, ev.Name)
		if ev.Cached {
			msg += " CACHED"
		}
		b.append(buildLogEntry{Timestamp: now, Level: "info", Message: msg, Step: step})
	case "log":
		if b.partial == nil {
			b.partial = map[string]string{}
		}
		text := b.partial[ev.Stream] + ev.Data
		lines := strings.Split(text, "\n")
		b.partial[ev.Stream] = lines[len(lines)-1]
		for _, l := range lines[:len(lines)-1] {
			b.append(buildLogEntry{Timestamp: now, Level: "info", Message: l, Step: step})
		}
	case "image":
		b.flush()
		b.append(buildLogEntry{Timestamp: now, Level: "info", Message: "template " + ev.Name + " built", Step: "finalize"})
	}
}

// flush logs the unfinished lines. The caller holds b.mu.
func (b *templateBuild) flush() {
	for _, s := range []string{"stdout", "stderr"} {
		if l := b.partial[s]; l != "" {
			b.append(buildLogEntry{Timestamp: time.Now().UTC(), Level: "info", Message: l})
			b.partial[s] = ""
		}
	}
}

// append adds an entry; past the log's bound, entries are dropped. The
// caller holds b.mu.
func (b *templateBuild) append(e buildLogEntry) {
	if len(b.entries) < maxLogEntries {
		b.entries = append(b.entries, e)
	}
}

// buildInfo is E2B's TemplateBuildInfo.
type buildInfo struct {
	Logs       []string        `json:"logs"`
	LogEntries []buildLogEntry `json:"logEntries"`
	TemplateID string          `json:"templateID"`
	BuildID    string          `json:"buildID"`
	Status     string          `json:"status"`
	Reason     *statusReason   `json:"reason,omitempty"`
}

// buildStatus is GET /templates/{id}/builds/{buildID}/status: the
// build's status and its log from logsOffset, at most limit (100)
// entries, of level or above.
func (a *API) buildStatus(w http.ResponseWriter, r *http.Request) {
	id, buildID := r.PathValue("id"), r.PathValue("buildID")
	q := r.URL.Query()
	num := func(name string, def, hi int) (int, error) {
		s := q.Get(name)
		if s == "" {
			return def, nil
		}
		n, err := strconv.Atoi(s)
		if err != nil || n < 0 || n > hi {
			return 0, fmt.Errorf("%s %q must be between 0 and %d: %w", name, s, hi, errdefs.ErrInvalidArgument)
		}
		return n, nil
	}
	off, err := num("logsOffset", 0, 1<<30)
	if err == nil {
		var limit int
		limit, err = num("limit", 100, 100)
		if err == nil {
			err = a.writeBuildStatus(w, id, buildID, off, limit, q.Get("level"))
		}
	}
	if err != nil {
		a.fail(w, r, err)
	}
}

func (a *API) writeBuildStatus(w http.ResponseWriter, id, buildID string, off, limit int, level string) error {
	floor, ok := levels[cmp.Or(level, "debug")]
	if !ok {
		return fmt.Errorf("level %q: want debug, info, warn or error: %w", level, errdefs.ErrInvalidArgument)
	}
	out := buildInfo{TemplateID: id, BuildID: buildID, Logs: []string{}, LogEntries: []buildLogEntry{}}
	b, err := a.tmpl.get(id, buildID)
	if err != nil {
		// A build of an earlier run of the daemon: its record, no log.
		rec, rerr := a.readRecord(id)
		if rerr != nil {
			return err
		}
		i := slices.IndexFunc(rec.Builds, func(b buildRecord) bool { return b.ID == buildID })
		if i < 0 {
			return err
		}
		out.Status = rec.Builds[i].Status
		if out.Status == statusWaiting || out.Status == statusBuilding {
			out.Status = statusError
			out.Reason = &statusReason{Message: "the daemon restarted during the build", LogEntries: []buildLogEntry{}}
		}
		writeJSON(w, http.StatusOK, out)
		return nil
	}
	b.mu.Lock()
	out.Status, out.Reason = b.status, b.reason
	var entries []buildLogEntry
	for _, e := range b.entries {
		if levels[e.Level] >= floor {
			entries = append(entries, e)
		}
	}
	b.mu.Unlock()
	if off < len(entries) {
		entries = entries[off:min(len(entries), off+limit)]
		out.LogEntries = entries
		for _, e := range entries {
			out.Logs = append(out.Logs, e.Message)
		}
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

// templateJSON is E2B's Template.
type templateJSON struct {
	TemplateID    string     `json:"templateID"`
	BuildID       string     `json:"buildID"`
	CPUCount      int        `json:"cpuCount"`
	MemoryMB      int64      `json:"memoryMB"`
	DiskSizeMB    int64      `json:"diskSizeMB"`
	Public        bool       `json:"public"`
	Aliases       []string   `json:"aliases"`
	Names         []string   `json:"names"`
	CreatedAt     time.Time  `json:"createdAt"`
	UpdatedAt     time.Time  `json:"updatedAt"`
	CreatedBy     *struct{}  `json:"createdBy"`
	LastSpawnedAt *time.Time `json:"lastSpawnedAt"`
	SpawnCount    int64      `json:"spawnCount"`
	BuildCount    int        `json:"buildCount"`
	EnvdVersion   string     `json:"envdVersion"`
	BuildStatus   string     `json:"buildStatus"`
}

// templateBuildJSON is E2B's TemplateBuild.
type templateBuildJSON struct {
	BuildID     string     `json:"buildID"`
	Status      string     `json:"status"`
	CreatedAt   time.Time  `json:"createdAt"`
	UpdatedAt   time.Time  `json:"updatedAt"`
	FinishedAt  *time.Time `json:"finishedAt,omitempty"`
	CPUCount    int        `json:"cpuCount"`
	MemoryMB    int64      `json:"memoryMB"`
	DiskSizeMB  int64      `json:"diskSizeMB,omitempty"`
	EnvdVersion string     `json:"envdVersion"`
}

// templateWithBuilds is E2B's TemplateWithBuilds.
type templateWithBuilds struct {
	TemplateID    string              `json:"templateID"`
	Public        bool                `json:"public"`
	Aliases       []string            `json:"aliases"`
	Names         []string            `json:"names"`
	CreatedAt     time.Time           `json:"createdAt"`
	UpdatedAt     time.Time           `json:"updatedAt"`
	LastSpawnedAt *time.Time          `json:"lastSpawnedAt"`
	SpawnCount    int64               `json:"spawnCount"`
	Builds        []templateBuildJSON `json:"builds"`
}

// templateOf is image img as an E2B template. Every Corral image is one;
// those built through the E2B API (rec non-nil) have builds of their own,
// the others one, named by their top layer.
func templateOf(img sandbox.Image, rec *templateRecord) templateJSON {
	t := templateJSON{
		TemplateID: img.Name, BuildID: img.TopLayer,
		CPUCount: cpuCount(img.Resources.CPUs), MemoryMB: mib(img.Resources.MemoryBytes), DiskSizeMB: mib(img.Resources.DiskBytes),
		Aliases: []string{img.Name}, Names: []string{img.Name},
		CreatedAt: img.Created, UpdatedAt: img.Created, BuildCount: 1, EnvdVersion: EnvdVersion, BuildStatus: statusReady,
	}
	if rec != nil && len(rec.Builds) > 0 {
		t.BuildCount, t.CreatedAt = len(rec.Builds), rec.Created
		for _, b := range slices.Backward(rec.Builds) {
			if b.Status == statusReady {
				t.BuildID = b.ID
				break
			}
		}
	}
	return t
}

// listTemplates is GET /templates and /v2/templates: every image but the
// tags of templates (a template's "name:tag" images).
func (a *API) listTemplates(w http.ResponseWriter, r *http.Request) {
	imgs, err := a.listImages(r.Context())
	if err != nil {
		a.fail(w, r, err)
		return
	}
	slices.SortFunc(imgs, func(x, y sandbox.Image) int { return strings.Compare(x.Name, y.Name) })
	page, next := imgs, ""
	if r.URL.Path != "/templates" { // v1 has no pages
		var err error
		page, next, err = paginate(r.URL.Query(), imgs, func(img sandbox.Image) string { return img.Name })
		if err != nil {
			a.fail(w, r, err)
			return
		}
	}
	out := make([]templateJSON, 0, len(page))
	for _, img := range page {
		var rec *templateRecord
		if a.cfg.TemplateDir != "" {
			if t, err := a.readRecord(img.Name); err == nil {
				rec = &t
			}
		}
		out = append(out, templateOf(img, rec))
	}
	if next != "" {
		w.Header().Set("X-Next-Token", next)
	}
	writeJSON(w, http.StatusOK, out)
}

// getTemplate is GET /templates/{id}: the template and its builds.
func (a *API) getTemplate(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	imgs, err := a.listImages(r.Context())
	if err != nil {
		a.fail(w, r, err)
		return
	}
	var rec *templateRecord
	if a.cfg.TemplateDir != "" {
		if t, err := a.readRecord(id); err == nil {
			rec = &t
		}
	}
	i := slices.IndexFunc(imgs, func(img sandbox.Image) bool { return img.Name == id })
	if i < 0 && rec == nil {
		a.fail(w, r, fmt.Errorf("template %q: %w", id, errdefs.ErrNotFound))
		return
	}
	out := templateWithBuilds{TemplateID: id, Aliases: []string{id}, Names: []string{id}, Builds: []templateBuildJSON{}}
	if i >= 0 {
		img := imgs[i]
		out.CreatedAt, out.UpdatedAt = img.Created, img.Created
		if rec == nil {
			out.Builds = append(out.Builds, templateBuildJSON{
				BuildID: img.TopLayer, Status: statusReady, CreatedAt: img.Created, UpdatedAt: img.Created, FinishedAt: &img.Created,
				CPUCount: cpuCount(img.Resources.CPUs), MemoryMB: mib(img.Resources.MemoryBytes), DiskSizeMB: mib(img.Resources.DiskBytes),
				EnvdVersion: EnvdVersion,
			})
		}
	}
	if rec != nil {
		out.CreatedAt = rec.Created
		for _, b := range slices.Backward(rec.Builds) {
			out.Builds = append(out.Builds, templateBuildJSON{
				BuildID: b.ID, Status: b.Status, CreatedAt: b.Created, UpdatedAt: b.Updated, FinishedAt: b.Finished,
				CPUCount: cpuCount(rec.CPUs), MemoryMB: rec.MemoryMB, EnvdVersion: EnvdVersion,
			})
		}
		if len(rec.Builds) > 0 {
			out.UpdatedAt = rec.Builds[len(rec.Builds)-1].Updated
		}
	}
	writeJSON(w, http.StatusOK, out)
}

// templateAlias is GET /templates/aliases/{alias} (Template.exists): 200
// when the name is a template (an image), else 404.
func (a *API) templateAlias(w http.ResponseWriter, r *http.Request) {
	alias := r.PathValue("alias")
	imgs, err := a.listImages(r.Context())
	if err != nil {
		a.fail(w, r, err)
		return
	}
	if !slices.ContainsFunc(imgs, func(img sandbox.Image) bool { return img.Name == alias }) {
		a.fail(w, r, fmt.Errorf("template %q: %w", alias, errdefs.ErrNotFound))
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"templateID": alias, "public": false})
}

// deleteBuilt removes template name, built through the E2B API: its
// image, the images of its tags, and its record and uploaded files. A
// template with a build under way is refused.
func (a *API) deleteBuilt(ctx context.Context, name string) error {
	a.recordMu.Lock()
	defer a.recordMu.Unlock()
	rec, err := a.readRecord(name)
	if err != nil {
		return err
	}
	for _, rb := range rec.Builds {
		if b, err := a.tmpl.get(name, rb.ID); err == nil {
			b.mu.Lock()
			building := b.status == statusBuilding
			b.mu.Unlock()
			if building {
				return fmt.Errorf("template %s: build %s is under way: wait for its end: %w", name, rb.ID, errdefs.ErrFailedPrecondition)
			}
		}
	}
	for _, t := range rec.Tags {
		if err := a.cfg.TemplateImages.Remove(ctx, name+":"+t); err != nil && !errdefs.IsNotFound(err) {
			return err
		}
	}
	if err := a.cfg.TemplateImages.Remove(ctx, name); err != nil && !errdefs.IsNotFound(err) {
		return err
	}
	return os.RemoveAll(a.templateDir(name))
}
