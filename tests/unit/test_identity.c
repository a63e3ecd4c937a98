// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
/* Unit tests of daemon/tracked/identity.c: command lines joined and cut, the cgroup paths that
 * systemd, Docker, containerd, podman and the kubelet write, hostile names escaped, and the
 * workload name that survives restarts. */
#include <string.h>

#include "check.h"
#include "tracked/identity.h"

#define ID_CGROUP(text) lp_identity_cgroup(&id, text)

int main(void)
{
	struct lp_identity id;
	char out[LP_IDENT_CMDLINE], big[600], w[160];
	struct lp_context ctx;

	lp_identity_cmdline(out, sizeof(out), "node\0app.js\0--port\0008080\0", 25);
	CHECK(!strcmp(out, "node app.js --port 8080"), "cmdline joined: %s", out);
	lp_identity_cmdline(out, sizeof(out), "x\033[2J\0\n", 7);
	CHECK(!strcmp(out, "x\\x1b[2J \\x0a"), "escapes kept out: %s", out);
	memset(big, 'a', sizeof(big));
	lp_identity_cmdline(out, sizeof(out), big, sizeof(big));
	CHECK(strlen(out) == sizeof(out) - 1 && !strcmp(out + strlen(out) - 3, "..."),
	      "a long command line is cut with ...: %zu", strlen(out));
	memset(big, '\033', 100);
	lp_identity_cmdline(out, sizeof(out), big, 100);
	CHECK(strlen(out) < sizeof(out) && !strcmp(out + strlen(out) - 3, "..."),
	      "cut when the escaping outgrows it: %zu", strlen(out));

	{
		static const char *const cases[][2] = {
			{"llama-server -m /m.gguf --api-key s3cr3t --port 8080",
			 "llama-server -m /m.gguf --api-key <redacted> --port 8080"},
			{"llama-server --api-key=s3cr3t -t 4",
			 "llama-server --api-key=<redacted> -t 4"},
			{"x --hf-token hf_abc --ssl-key-file /k.pem --keep 5",
			 "x --hf-token <redacted> --ssl-key-file <redacted> --keep 5"},
			{"x --model-url https://u:pw@host/m.gguf?a=1&token=t0k&b=2",
			 "x --model-url https://u:<redacted>@host/m.gguf?a=1&token=<redacted>&b=2"},
			{"x -PASSWORD=y http://h/p?Auth=z",
			 "x -PASSWORD=<redacted> http://h/p?Auth=<redacted>"},
			{"ollama serve", "ollama serve"},
			{"x --api-key", "x --api-key"},
		};

		for (size_t i = 0; i < sizeof(cases) / sizeof(*cases); i++) {
			lp_identity_cmdline_redacted(out, sizeof(out), cases[i][0]);
			CHECK(!strcmp(out, cases[i][1]), "redacted: %s -> %s", cases[i][0], out);
		}
		lp_identity_cmdline_redacted(out, 12, "x --api-key s3cr3t");
		CHECK(!strcmp(out, "x --api-key"), "cut to its size: %s", out);
	}

	ID_CGROUP("0::/system.slice/llama-server.service\n");
	CHECK(!strcmp(id.cgroup, "/system.slice/llama-server.service") &&
		      !strcmp(id.unit, "llama-server.service") && !id.container[0] && !id.pod[0],
	      "v2 service: %s %s", id.cgroup, id.unit);
	ID_CGROUP("12:cpu,cpuacct:/user.slice\n1:name=systemd:/system.slice/ollama.service\n"
		  "0::/\n");
	CHECK(!strcmp(id.cgroup, "/") && !id.unit[0], "v2's line wins over v1's: %s", id.cgroup);
	ID_CGROUP("12:cpu,cpuacct:/user.slice\n1:name=systemd:/system.slice/ollama.service\n");
	CHECK(!strcmp(id.unit, "ollama.service"), "v1: name=systemd over cpu: %s", id.unit);
	ID_CGROUP("0::/system.slice/docker-"
		  "4f3c2a1b0e9d8c7b6a5f4e3d2c1b0a9f8e7d6c5b4a3f2e1d0c9b8a7f6e5d4c3b.scope\n");
	CHECK(!strcmp(id.container,
		      "4f3c2a1b0e9d8c7b6a5f4e3d2c1b0a9f8e7d6c5b4a3f2e1d0c9b8a7f6e5d4c3b") &&
		      !strncmp(id.unit, "docker-4f3c", 11),
	      "docker: %s", id.container);
	lp_identity_workload(&id, "node", w, sizeof(w));
	CHECK(!strcmp(w, "container/4f3c2a1b0e9d"), "a container's workload: %s", w);
	ID_CGROUP("0::/kubepods.slice/kubepods-burstable.slice/"
		  "kubepods-burstable-pod8f2d1c3e_5a4b_4c3d_9e8f_7a6b5c4d3e2f.slice/"
		  "cri-containerd-"
		  "aa11bb22cc33dd44ee55ff66aa11bb22cc33dd44ee55ff66aa11bb22cc33dd44.scope\n");
	CHECK(!strcmp(id.pod, "8f2d1c3e-5a4b-4c3d-9e8f-7a6b5c4d3e2f") &&
		      !strncmp(id.container, "aa11bb22", 8),
	      "kubelet (systemd driver): pod %s container %s", id.pod, id.container);
	ID_CGROUP("0::/kubepods/besteffort/pod8f2d1c3e-5a4b-4c3d-9e8f-7a6b5c4d3e2f/"
		  "aa11bb22cc33dd44ee55ff66aa11bb22cc33dd44ee55ff66aa11bb22cc33dd44\n");
	CHECK(!strcmp(id.pod, "8f2d1c3e-5a4b-4c3d-9e8f-7a6b5c4d3e2f") &&
		      !strncmp(id.container, "aa11bb22", 8) && !id.unit[0],
	      "kubelet (cgroupfs driver): pod %s", id.pod);
	ID_CGROUP("0::/user.slice/evil\033]0;x\a.service\n");
	CHECK(!strcmp(id.unit, "evil\\x1b]0;x\\x07.service"), "a hostile unit is escaped: %s",
	      id.unit);
	ID_CGROUP("0::/system.slice/a.service/sub\n");
	lp_identity_workload(&id, "llama-server", w, sizeof(w));
	CHECK(!strcmp(w, "a.service"), "a service's workload: %s", w);
	ID_CGROUP("0::/user.slice/user-0.slice/session-3.scope\n");
	lp_identity_workload(&id, "node", w, sizeof(w));
	CHECK(!strcmp(w, "node"), "a session scope is no workload: comm %s", w);
	ID_CGROUP("garbage without colons\n::\n0:");
	CHECK(!id.cgroup[0] && !id.unit[0], "garbage gives nothing");

	memset(&id, 0, sizeof(id));
	memset(&ctx, 0, sizeof(ctx));
	ctx.weights_file_type = 7;
	CHECK(!lp_identity_set_model(&id, &ctx) && !*lp_identity_model_name(&id),
	      "no model until one is mapped");
	strcpy(ctx.weights_path, "/srv/models/qwen\n.gguf");
	strcpy(ctx.weights_arch, "qwen2");
	ctx.weights_file_bytes = 1234;
	CHECK(lp_identity_set_model(&id, &ctx) && !lp_identity_set_model(&id, &ctx),
	      "a model is taken once");
	CHECK(!strcmp(lp_identity_model_name(&id), "qwen\\x0a.gguf") &&
		      !strcmp(id.model_type, "Q8_0") && !strcmp(id.model_arch, "qwen2") &&
		      id.model_bytes == 1234,
	      "model %s %s %s", id.model, id.model_type, id.model_arch);
	return check_done();
}
