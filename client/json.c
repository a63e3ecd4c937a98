// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
/* Reading the API's documents: absent or mistyped members read as a default, so a newer
 * daemon's extra or missing fields never crash the client. */
#include "llmprofctl.h"

double ctl_num(const cJSON *o, const char *key, double def)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);

	return cJSON_IsNumber(v) ? v->valuedouble : def;
}

double ctl_num_path(const cJSON *o, const char *a, const char *b, double def)
{
	return ctl_num(cJSON_GetObjectItemCaseSensitive(o, a), b, def);
}

const char *ctl_str(const cJSON *o, const char *key, const char *def)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);

	return cJSON_IsString(v) && v->valuestring ? v->valuestring : def;
}

bool ctl_true(const cJSON *o, const char *key)
{
	return cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(o, key));
}
