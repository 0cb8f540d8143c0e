package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"

	"github.com/lmwarden/lmwarden/agent/adminapi"
)

// adminClient talks to the warden's admin API: it lists a model's replicas
// (for their /metrics) and switches affinity and policy between arms.
type adminClient struct {
	base   string
	client *http.Client
	token  string // the admin token its PUTs carry
}

// models reads GET /api/v1/models.
func (a adminClient) models(ctx context.Context) ([]adminapi.ModelStatus, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimRight(a.base, "/")+"/api/v1/models", nil)
	if err != nil {
		return nil, err
	}
	resp, err := a.client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrArmSwitch, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 8<<20))
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%w: GET /api/v1/models: %s", ErrArmSwitch, resp.Status)
	}
	var list []adminapi.ModelStatus
	if err := json.Unmarshal(b, &list); err == nil {
		return list, nil
	}
	var wrapped struct {
		Models []adminapi.ModelStatus `json:"models"`
	}
	if err := json.Unmarshal(b, &wrapped); err != nil {
		return nil, fmt.Errorf("%w: GET /api/v1/models: %v", ErrArmSwitch, err)
	}
	return wrapped.Models, nil
}

// model returns the named model, or the only one when name is "".
func (a adminClient) model(ctx context.Context, name string) (adminapi.ModelStatus, error) {
	list, err := a.models(ctx)
	if err != nil {
		return adminapi.ModelStatus{}, err
	}
	for _, m := range list {
		if m.Name == name || (name == "" && len(list) == 1) {
			return m, nil
		}
	}
	names := make([]string, len(list))
	for i, m := range list {
		names[i] = m.Name
	}
	return adminapi.ModelStatus{}, fmt.Errorf("%w: model %q not among %v (use --model-name)", ErrArmSwitch, name, names)
}

// setArm switches the model's affinity through PUT
// /api/v1/models/{name}/affinity and, for an arm named after a policy, its
// policy through PUT /api/v1/models/{name}/policy; the arm "on" runs the
// warden's own policy (own). It reads the model back to check the switch
// took.
func (a adminClient) setArm(ctx context.Context, model string, arm Arm, own string) error {
	if err := a.put(ctx, model, "affinity", map[string]any{"affinity": arm.Affinity}); err != nil {
		return err
	}
	want := own
	if arm.Affinity && arm.Name != ArmOn {
		want = string(arm.Policy)
	}
	if want != "" {
		if err := a.put(ctx, model, "policy", map[string]any{"policy": want}); err != nil {
			return err
		}
	}
	m, err := a.model(ctx, model)
	if err != nil {
		return err
	}
	if m.Affinity != arm.Affinity {
		return fmt.Errorf("%w: asked affinity=%v, the warden reports %v", ErrArmSwitch, arm.Affinity, m.Affinity)
	}
	if want != "" && m.Policy != want {
		return fmt.Errorf("%w: asked policy %s, the warden reports %s", ErrArmSwitch, want, m.Policy)
	}
	return nil
}

// restore puts the model back the way the run found it.
func (a adminClient) restore(ctx context.Context, model string, affinity bool, policy string) error {
	if err := a.put(ctx, model, "affinity", map[string]any{"affinity": affinity}); err != nil {
		return err
	}
	if policy == "" {
		return nil
	}
	return a.put(ctx, model, "policy", map[string]any{"policy": policy})
}

// put sends PUT /api/v1/models/{model}/{what} with a JSON body.
func (a adminClient) put(ctx context.Context, model, what string, body map[string]any) error {
	b, _ := json.Marshal(body)
	u := strings.TrimRight(a.base, "/") + "/api/v1/models/" + url.PathEscape(model) + "/" + what
	req, err := http.NewRequestWithContext(ctx, http.MethodPut, u, bytes.NewReader(b))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	if a.token != "" {
		req.Header.Set("Authorization", "Bearer "+a.token)
	}
	resp, err := a.client.Do(req)
	if err != nil {
		return fmt.Errorf("%w: %v", ErrArmSwitch, err)
	}
	msg, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	if resp.StatusCode == http.StatusUnauthorized {
		resp.Body.Close()
		return fmt.Errorf("%w: PUT %s: %s: the warden's admin writes need its token (--admin-token-file; docs/admin.md)", ErrArmSwitch, u, resp.Status)
	}
	resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("%w: PUT %s: %s: %s", ErrArmSwitch, u, resp.Status, strings.TrimSpace(string(msg)))
	}
	return nil
}
