/*
 * Stand-in libdcmi.so for vnpu's tests: the DCMI C ABI (same function signatures and
 * structure layouts as Ascend's dcmi_interface_api.h) answered from a simulated node.
 *
 * The node is the directory named by the environment variable VNPU_SIM_DIR, read on
 * every call: DIR/state.txt in the line format of vnpu_npu.sim.state,
 * guarded by flock(2) on DIR/state.lock (shared to read, exclusive to change). Changes
 * write DIR/state.txt.<pid>.tmp and rename it over state.txt; this library rewrites
 * only "vnpu" lines and copies every other line unchanged. The Python side creates the
 * state from chips.yaml; this library never does.
 *
 * Build:  gcc -shared -fPIC -O2 -Wall -Wextra -o libdcmi.so stand_in_dcmi.c
 *         add -DOLD_DRIVER for an older driver without dcmi_get_card_list,
 *         dcmi_get_device_errorcode_v2 and dcmi_get_device_memory_info_v3 (it has
 *         dcmi_get_card_num_list instead of dcmi_get_card_list).
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <unistd.h>

/* ---- return codes ------------------------------------------------------------------ */
#define DCMI_OK 0
#define E_PARAM (-8001)
#define E_INNER (-8005)
#define E_DEVICE_ID (-8007)
#define E_NOT_READY (-8012)
#define E_OCCUPIED (-8020)
#define E_NOT_SUPPORTED (-8255)

/* ---- the documented ABI ------------------------------------------------------------ */
struct dcmi_chip_info {
    unsigned char chip_type[32];
    unsigned char chip_name[32];
    unsigned char chip_ver[32];
    unsigned int aicore_cnt;
};

struct dcmi_pcie_info_all {
    unsigned int venderid, subvenderid, deviceid, subdeviceid;
    int domain;
    unsigned int bdf_busid, bdf_deviceid, bdf_funcid;
    unsigned char reserve[32];
};

struct dcmi_die_id { unsigned int soc_die[5]; };

struct dcmi_hbm_info {
    unsigned long long memory_size;
    unsigned int freq;
    unsigned long long memory_usage;
    int temp;
    unsigned int bandwith_util_rate;
};

struct dcmi_get_memory_info_stru {
    unsigned long long memory_size;
    unsigned long long memory_available;
    unsigned int freq;
    unsigned long hugepagesize;
    unsigned long hugepages_total;
    unsigned long hugepages_free;
    unsigned int utiliza;
    unsigned char reserve[60];
};

struct dcmi_memory_info_stru {
    unsigned long long memory_size;
    unsigned int freq;
    unsigned int utiliza;
};

struct dcmi_base_resource {
    unsigned long long token, token_max, task_timeout;
    unsigned int vfg_id;
    unsigned char vip_mode;
    unsigned char reserved[31];
};

struct dcmi_computing_resource {
    float aic, aiv;
    unsigned short dsa, rtsq, acsq, cdqm, c_core, ffts, sdma, pcie_dma;
    unsigned long long memory_size;
    unsigned int event_id, notify_id, stream_id, model_id;
    unsigned short topic_schedule_aicpu, host_ctrl_cpu, host_aicpu, device_aicpu, topic_ctrl_cpu_slot;
    unsigned int vdev_aicore_utilization;
    unsigned long long vdev_memory_total, vdev_memory_free;
    unsigned char reserved[12];
};

struct dcmi_media_resource {
    float jpegd, jpege, vpc, vdec, pngd, venc;
    unsigned char reserved[32];
};

struct dcmi_create_vdev_res_stru {
    unsigned int vdev_id, vfg_id;
    char template_name[32];
    unsigned char reserved[64];
};

struct dcmi_create_vdev_out {
    unsigned int vdev_id, pcie_bus, pcie_device, pcie_func, vfg_id;
    unsigned char reserved[32];
};

struct dcmi_vdev_query_info {
    char name[16];
    unsigned int status, is_container_used, vfid, vfg_id;
    unsigned long long container_id;
    struct dcmi_base_resource base;
    struct dcmi_computing_resource computing;
    struct dcmi_media_resource media;
};

struct dcmi_vdev_query_stru {
    unsigned int vdev_id;
    struct dcmi_vdev_query_info query_info;
};

struct dcmi_soc_free_resource {
    unsigned int vfg_num, vfg_bitmap;
    struct dcmi_base_resource base;
    struct dcmi_computing_resource computing;
    struct dcmi_media_resource media;
};

struct dcmi_soc_total_resource {
    unsigned int vdev_num;
    unsigned int vdev_id[32];
    unsigned int vfg_num, vfg_bitmap;
    struct dcmi_base_resource base;
    struct dcmi_computing_resource computing;
    struct dcmi_media_resource media;
};

/* ---- the simulated node -------------------------------------------------------------- */
#define MAX_CHIPS 64
#define MAX_TEMPLATES 32
#define MAX_VNPUS 1024
#define MAX_CODES 128
#define ENGINES 6 /* vpc, vdec, jpegd, jpege, venc, pngd: vnpu_core.catalog.MEDIA_ENGINES */
#define AUTO_ID 0xFFFFFFFFu
#define DESTROY_ALL 65535u

struct chip {
    int phy, card, device, logic;
    char name[32], type[32], version[32];
    unsigned int aicore, aicpu, max_vnpus, idbase, idcount;
    unsigned long long memory;
    int hbm;
    unsigned int uuid[5];
    unsigned int domain, bus, dev, func;
    int has_media;
    unsigned int media[ENGINES];
    /* status */
    unsigned int health;
    int gone, ncodes;
    unsigned int codes[MAX_CODES];
    int temp, power_dw;
    unsigned int load_aicore;
    unsigned long long load_memory;
};

struct tmpl {
    char name[32];
    unsigned int aicore, aicpu;
    unsigned long long memory;
    int has_media;
    unsigned int media[ENGINES];
};

struct vnpu {
    unsigned int id;
    int phy, used;
    char tmpl[32];
    unsigned int aicore;
    unsigned long long memory;
};

struct state {
    int nchips, ntmpl, nvnpu;
    struct chip chips[MAX_CHIPS];
    struct tmpl tmpls[MAX_TEMPLATES];
    struct vnpu vnpus[MAX_VNPUS];
    char *text; /* the file as read, to copy its non-vnpu lines on save */
    int lock_fd;
};

static void release(struct state *st) {
    if (!st) return;
    if (st->lock_fd >= 0) close(st->lock_fd); /* closing drops the flock */
    free(st->text);
    free(st);
}

static void copy_text(char *dst, size_t size, const char *src) {
    size_t n = strnlen(src, size - 1);
    memcpy(dst, src, n);
    dst[n] = '\0';
}

static int parse_list(const char *value, unsigned int *out, int max, int base) {
    if (strcmp(value, "-") == 0) return 0;
    int n = 0;
    const char *p = value;
    while (*p && n < max) {
        char *end;
        out[n++] = (unsigned int)strtoul(p, &end, base);
        if (*end != ',') break;
        p = end + 1;
    }
    return n;
}

static void parse_chip_field(struct chip *c, const char *key, const char *value) {
    if (!strcmp(key, "phy")) c->phy = atoi(value);
    else if (!strcmp(key, "card")) c->card = atoi(value);
    else if (!strcmp(key, "device")) c->device = atoi(value);
    else if (!strcmp(key, "logic")) c->logic = atoi(value);
    else if (!strcmp(key, "name")) copy_text(c->name, sizeof c->name, value);
    else if (!strcmp(key, "type")) copy_text(c->type, sizeof c->type, value);
    else if (!strcmp(key, "version")) copy_text(c->version, sizeof c->version, value);
    else if (!strcmp(key, "aicore")) c->aicore = (unsigned int)strtoul(value, NULL, 10);
    else if (!strcmp(key, "aicpu")) c->aicpu = (unsigned int)strtoul(value, NULL, 10);
    else if (!strcmp(key, "memory")) c->memory = strtoull(value, NULL, 10);
    else if (!strcmp(key, "memkind")) c->hbm = strcmp(value, "hbm") == 0;
    else if (!strcmp(key, "vnpus")) c->max_vnpus = (unsigned int)strtoul(value, NULL, 10);
    else if (!strcmp(key, "idbase")) c->idbase = (unsigned int)strtoul(value, NULL, 10);
    else if (!strcmp(key, "idcount")) c->idcount = (unsigned int)strtoul(value, NULL, 10);
    else if (!strcmp(key, "uuid"))
        sscanf(value, "%8x-%8x-%8x-%8x-%8x", &c->uuid[0], &c->uuid[1], &c->uuid[2], &c->uuid[3], &c->uuid[4]);
    else if (!strcmp(key, "bdf")) sscanf(value, "%x:%x:%x.%x", &c->domain, &c->bus, &c->dev, &c->func);
    else if (!strcmp(key, "media")) c->has_media = parse_list(value, c->media, ENGINES, 10) == ENGINES;
}

static void parse_status_field(struct chip *c, const char *key, const char *value) {
    if (!strcmp(key, "health")) c->health = (unsigned int)strtoul(value, NULL, 10);
    else if (!strcmp(key, "gone")) c->gone = atoi(value);
    else if (!strcmp(key, "codes")) c->ncodes = parse_list(value, c->codes, MAX_CODES, 16);
    else if (!strcmp(key, "temp")) c->temp = atoi(value);
    else if (!strcmp(key, "power_dw")) c->power_dw = atoi(value);
    else if (!strcmp(key, "aicore")) c->load_aicore = (unsigned int)strtoul(value, NULL, 10);
    else if (!strcmp(key, "memory")) c->load_memory = strtoull(value, NULL, 10);
}

static void parse_tmpl_field(struct tmpl *t, const char *key, const char *value) {
    if (!strcmp(key, "name")) copy_text(t->name, sizeof t->name, value);
    else if (!strcmp(key, "aicore")) t->aicore = (unsigned int)strtoul(value, NULL, 10);
    else if (!strcmp(key, "aicpu")) t->aicpu = (unsigned int)strtoul(value, NULL, 10);
    else if (!strcmp(key, "memory")) t->memory = strtoull(value, NULL, 10);
    else if (!strcmp(key, "media")) t->has_media = parse_list(value, t->media, ENGINES, 10) == ENGINES;
}

static void parse_vnpu_field(struct vnpu *v, const char *key, const char *value) {
    if (!strcmp(key, "id")) v->id = (unsigned int)strtoul(value, NULL, 10);
    else if (!strcmp(key, "phy")) v->phy = atoi(value);
    else if (!strcmp(key, "template")) copy_text(v->tmpl, sizeof v->tmpl, value);
    else if (!strcmp(key, "used")) v->used = atoi(value);
    else if (!strcmp(key, "aicore")) v->aicore = (unsigned int)strtoul(value, NULL, 10);
    else if (!strcmp(key, "memory")) v->memory = strtoull(value, NULL, 10);
}

static struct chip *chip_by_phy(struct state *st, int phy) {
    for (int i = 0; i < st->nchips; i++)
        if (st->chips[i].phy == phy) return &st->chips[i];
    return NULL;
}

/* Parse one line in place; returns 0, or -1 on a line this format does not allow. */
static int parse_line(struct state *st, char *line) {
    char *save = NULL;
    char *word = strtok_r(line, " \r", &save);
    if (!word || word[0] == '#') return 0;
    if (!strcmp(word, "format")) {
        char *v = strtok_r(NULL, " \r", &save);
        return (v && !strcmp(v, "1")) ? 0 : -1;
    }
    struct chip status = {0};
    struct chip *c = NULL;
    struct tmpl *t = NULL;
    struct vnpu *v = NULL;
    int is_status = !strcmp(word, "status");
    if (!strcmp(word, "chip")) {
        if (st->nchips == MAX_CHIPS) return -1;
        c = &st->chips[st->nchips++];
        c->temp = 45;
    } else if (!strcmp(word, "template")) {
        if (st->ntmpl == MAX_TEMPLATES) return -1;
        t = &st->tmpls[st->ntmpl++];
    } else if (!strcmp(word, "vnpu")) {
        if (st->nvnpu == MAX_VNPUS) return -1;
        v = &st->vnpus[st->nvnpu++];
    } else if (!is_status) {
        return 0; /* config and records this library does not use */
    }
    char *token;
    int phy = -1;
    while ((token = strtok_r(NULL, " \r", &save))) {
        char *eq = strchr(token, '=');
        if (!eq) return -1;
        *eq = '\0';
        const char *key = token, *value = eq + 1;
        if (c) parse_chip_field(c, key, value);
        else if (t) parse_tmpl_field(t, key, value);
        else if (v) parse_vnpu_field(v, key, value);
        else if (!strcmp(key, "phy")) phy = atoi(value);
        else parse_status_field(&status, key, value);
    }
    if (is_status) { /* status lines follow the chip lines they describe */
        struct chip *target = chip_by_phy(st, phy);
        if (!target) return -1;
        target->health = status.health;
        target->gone = status.gone;
        target->ncodes = status.ncodes;
        memcpy(target->codes, status.codes, sizeof status.codes);
        target->temp = status.temp;
        target->power_dw = status.power_dw;
        target->load_aicore = status.load_aicore;
        target->load_memory = status.load_memory;
    }
    return 0;
}

static char *state_path(char *buf, size_t size, const char *name) {
    const char *dir = getenv("VNPU_SIM_DIR");
    if (!dir || !*dir) return NULL;
    snprintf(buf, size, "%s/%s", dir, name);
    return buf;
}

/* Read the node under a shared lock, or an exclusive one kept until save()/release(). */
static struct state *load(int exclusive) {
    char path[PATH_MAX];
    if (!state_path(path, sizeof path, "state.lock")) return NULL;
    struct state *st = calloc(1, sizeof *st);
    if (!st) return NULL;
    st->lock_fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (st->lock_fd < 0 || flock(st->lock_fd, exclusive ? LOCK_EX : LOCK_SH) != 0) goto fail;
    state_path(path, sizeof path, "state.txt");
    FILE *f = fopen(path, "re");
    if (!f) goto fail;
    size_t cap = 8192, len = 0;
    st->text = malloc(cap);
    size_t got;
    while (st->text && (got = fread(st->text + len, 1, cap - len - 1, f)) > 0) {
        len += got;
        if (cap - len < 2) st->text = realloc(st->text, cap *= 2);
    }
    fclose(f);
    if (!st->text) goto fail;
    st->text[len] = '\0';
    char *copy = strdup(st->text), *save = NULL;
    int bad = copy == NULL;
    for (char *line = copy ? strtok_r(copy, "\n", &save) : NULL; line && !bad; line = strtok_r(NULL, "\n", &save))
        bad = parse_line(st, line) != 0;
    free(copy);
    if (bad) goto fail;
    if (!exclusive) { close(st->lock_fd); st->lock_fd = -1; }
    return st;
fail:
    release(st);
    return NULL;
}

/* Write the node (other lines as read, then the vnpu lines) and drop the lock. */
static int save(struct state *st) {
    char path[PATH_MAX], tmp[PATH_MAX + 32];
    state_path(path, sizeof path, "state.txt");
    snprintf(tmp, sizeof tmp, "%s.%d.tmp", path, (int)getpid());
    FILE *f = fopen(tmp, "we");
    if (!f) return E_INNER;
    char *copy = strdup(st->text), *save_ptr = NULL;
    for (char *line = copy ? strtok_r(copy, "\n", &save_ptr) : NULL; line; line = strtok_r(NULL, "\n", &save_ptr))
        if (strncmp(line, "vnpu ", 5) != 0) fprintf(f, "%s\n", line);
    free(copy);
    for (int i = 0; i < st->nvnpu; i++) {
        struct vnpu *v = &st->vnpus[i];
        fprintf(f, "vnpu id=%u phy=%d template=%s used=%d aicore=%u memory=%llu\n", v->id, v->phy, v->tmpl,
                v->used, v->aicore, v->memory);
    }
    int rc = (fclose(f) == 0 && rename(tmp, path) == 0) ? DCMI_OK : E_INNER;
    if (rc != DCMI_OK) unlink(tmp);
    return rc;
}

static struct chip *chip_at(struct state *st, int card, int device) {
    for (int i = 0; i < st->nchips; i++)
        if (st->chips[i].card == card && st->chips[i].device == device) return &st->chips[i];
    return NULL;
}

/* Load the node and find (card, device); `ready` also refuses a chip that is gone. */
static int open_chip(struct state **st, struct chip **c, int card, int device, int ready, int exclusive) {
    *st = load(exclusive);
    if (!*st) return E_INNER;
    *c = chip_at(*st, card, device);
    int rc = !*c ? E_DEVICE_ID : (ready && (*c)->gone) ? E_NOT_READY : DCMI_OK;
    if (rc != DCMI_OK) { release(*st); *st = NULL; }
    return rc;
}

static struct tmpl *tmpl_by_name(struct state *st, const char *name) {
    for (int i = 0; i < st->ntmpl; i++)
        if (!strcmp(st->tmpls[i].name, name)) return &st->tmpls[i];
    return NULL;
}

static struct vnpu *vnpu_on(struct state *st, int phy, unsigned int id) {
    for (int i = 0; i < st->nvnpu; i++)
        if (st->vnpus[i].phy == phy && st->vnpus[i].id == id) return &st->vnpus[i];
    return NULL;
}

static unsigned long long chip_memory_used(struct state *st, struct chip *c) {
    unsigned long long used = c->load_memory;
    for (int i = 0; i < st->nvnpu; i++)
        if (st->vnpus[i].phy == c->phy) used += st->vnpus[i].memory;
    return used < c->memory ? used : c->memory;
}

/* What the vNPUs of a chip hold: count, memory, AI cores, AI CPUs, media engines. */
struct usage { unsigned int count, aicore, aicpu, media[ENGINES]; unsigned long long memory; };

static struct usage chip_usage(struct state *st, struct chip *c) {
    struct usage u = {0};
    for (int i = 0; i < st->nvnpu; i++) {
        if (st->vnpus[i].phy != c->phy) continue;
        u.count++;
        struct tmpl *t = tmpl_by_name(st, st->vnpus[i].tmpl);
        if (!t) continue;
        u.aicore += t->aicore;
        u.aicpu += t->aicpu;
        u.memory += t->memory;
        if (t->has_media)
            for (int e = 0; e < ENGINES; e++) u.media[e] += t->media[e];
    }
    return u;
}

/* catalog order vpc, vdec, jpegd, jpege, venc, pngd into the DCMI structure */
static void fill_media(struct dcmi_media_resource *m, const unsigned int *engines) {
    m->vpc = (float)engines[0];
    m->vdec = (float)engines[1];
    m->jpegd = (float)engines[2];
    m->jpege = (float)engines[3];
    m->venc = (float)engines[4];
    m->pngd = (float)engines[5];
}

/* ---- enumeration ------------------------------------------------------------------ */
static int card_list(int *card_num, int *card_list, int list_len) {
    if (!card_num || !card_list || list_len <= 0) return E_PARAM;
    struct state *st = load(0);
    if (!st) return E_INNER;
    int n = 0;
    for (int i = 0; i < st->nchips; i++) {
        int seen = 0;
        for (int j = 0; j < n; j++) seen |= card_list[j] == st->chips[i].card;
        if (!seen && n < list_len) card_list[n++] = st->chips[i].card;
    }
    *card_num = n;
    release(st);
    return DCMI_OK;
}

int dcmi_init(void) {
    struct state *st = load(0);
    if (!st) return E_INNER;
    release(st);
    return DCMI_OK;
}

#ifdef OLD_DRIVER
int dcmi_get_card_num_list(int *card_num, int *card_list_out, int list_length) {
    return card_list(card_num, card_list_out, list_length);
}
#else
int dcmi_get_card_list(int *card_num, int *card_list_out, int list_len) {
    return card_list(card_num, card_list_out, list_len);
}
#endif

int dcmi_get_device_num_in_card(int card_id, int *device_num) {
    if (!device_num) return E_PARAM;
    struct state *st = load(0);
    if (!st) return E_INNER;
    int n = 0;
    for (int i = 0; i < st->nchips; i++) n += st->chips[i].card == card_id;
    release(st);
    if (n == 0) return E_DEVICE_ID;
    *device_num = n;
    return DCMI_OK;
}

int dcmi_get_device_logic_id(int *device_logic_id, int card_id, int device_id) {
    struct state *st;
    struct chip *c;
    if (!device_logic_id) return E_PARAM;
    int rc = open_chip(&st, &c, card_id, device_id, 0, 0);
    if (rc) return rc;
    *device_logic_id = c->logic;
    release(st);
    return DCMI_OK;
}

int dcmi_get_device_phyid_from_logicid(unsigned int logicid, unsigned int *phyid) {
    if (!phyid) return E_PARAM;
    struct state *st = load(0);
    if (!st) return E_INNER;
    int rc = E_DEVICE_ID;
    for (int i = 0; i < st->nchips; i++)
        if ((unsigned int)st->chips[i].logic == logicid) { *phyid = (unsigned int)st->chips[i].phy; rc = DCMI_OK; }
    release(st);
    return rc;
}

int dcmi_get_device_chip_info(int card_id, int device_id, struct dcmi_chip_info *chip_info) {
    struct state *st;
    struct chip *c;
    if (!chip_info) return E_PARAM;
    int rc = open_chip(&st, &c, card_id, device_id, 0, 0);
    if (rc) return rc;
    memset(chip_info, 0, sizeof *chip_info);
    copy_text((char *)chip_info->chip_type, sizeof chip_info->chip_type, c->type);
    copy_text((char *)chip_info->chip_name, sizeof chip_info->chip_name, c->name);
    copy_text((char *)chip_info->chip_ver, sizeof chip_info->chip_ver, c->version);
    chip_info->aicore_cnt = c->aicore;
    release(st);
    return DCMI_OK;
}

int dcmi_get_device_pcie_info_v2(int card_id, int device_id, struct dcmi_pcie_info_all *pcie_info) {
    struct state *st;
    struct chip *c;
    if (!pcie_info) return E_PARAM;
    int rc = open_chip(&st, &c, card_id, device_id, 0, 0);
    if (rc) return rc;
    memset(pcie_info, 0, sizeof *pcie_info);
    pcie_info->venderid = 0x19e5;
    pcie_info->domain = (int)c->domain;
    pcie_info->bdf_busid = c->bus;
    pcie_info->bdf_deviceid = c->dev;
    pcie_info->bdf_funcid = c->func;
    release(st);
    return DCMI_OK;
}

int dcmi_get_device_die_v2(int card_id, int device_id, int input_type, struct dcmi_die_id *die_id) {
    struct state *st;
    struct chip *c;
    if (!die_id) return E_PARAM;
    if (input_type != 1) return E_NOT_SUPPORTED; /* only VDIE is simulated */
    int rc = open_chip(&st, &c, card_id, device_id, 0, 0);
    if (rc) return rc;
    memcpy(die_id->soc_die, c->uuid, sizeof c->uuid);
    release(st);
    return DCMI_OK;
}

/* ---- health and sensors ------------------------------------------------------------ */
int dcmi_get_device_health(int card_id, int device_id, unsigned int *health) {
    struct state *st;
    struct chip *c;
    if (!health) return E_PARAM;
    int rc = open_chip(&st, &c, card_id, device_id, 1, 0);
    if (rc) return rc;
    *health = c->health;
    release(st);
    return DCMI_OK;
}

static int error_codes(int card_id, int device_id, int *count, unsigned int *codes, unsigned int len) {
    struct state *st;
    struct chip *c;
    if (!count || !codes) return E_PARAM;
    int rc = open_chip(&st, &c, card_id, device_id, 1, 0);
    if (rc) return rc;
    *count = c->ncodes;
    for (int i = 0; i < c->ncodes && (unsigned int)i < len; i++) codes[i] = c->codes[i];
    release(st);
    return DCMI_OK;
}

#ifndef OLD_DRIVER
int dcmi_get_device_errorcode_v2(int card_id, int device_id, int *error_count, unsigned int *error_code_list,
                                 unsigned int list_len) {
    return error_codes(card_id, device_id, error_count, error_code_list, list_len);
}
#endif

int dcmi_get_device_errorcode(int card_id, int device_id, int *error_count, unsigned int *error_code,
                              int *error_width) {
    if (error_width) *error_width = (int)sizeof(unsigned int);
    return error_codes(card_id, device_id, error_count, error_code, MAX_CODES);
}

int dcmi_get_device_temperature(int card_id, int device_id, int *temperature) {
    struct state *st;
    struct chip *c;
    if (!temperature) return E_PARAM;
    int rc = open_chip(&st, &c, card_id, device_id, 1, 0);
    if (rc) return rc;
    *temperature = c->temp;
    release(st);
    return DCMI_OK;
}

int dcmi_get_device_power_info(int card_id, int device_id, int *power) {
    struct state *st;
    struct chip *c;
    if (!power) return E_PARAM;
    int rc = open_chip(&st, &c, card_id, device_id, 1, 0);
    if (rc) return rc;
    *power = c->power_dw;
    release(st);
    return DCMI_OK;
}

/* The card's power: the sum of its chips; a card with a chip gone gives no reading. */
int dcmi_mcu_get_power_info(int card_id, int *power) {
    if (!power) return E_PARAM;
    struct state *st = load(0);
    if (!st) return E_INNER;
    int sum = 0, found = 0, gone = 0;
    for (int i = 0; i < st->nchips; i++) {
        if (st->chips[i].card != card_id) continue;
        found = 1;
        gone |= st->chips[i].gone;
        sum += st->chips[i].power_dw;
    }
    release(st);
    if (!found) return E_DEVICE_ID;
    if (gone) return E_NOT_READY;
    *power = sum;
    return DCMI_OK;
}

int dcmi_get_device_utilization_rate(int card_id, int device_id, int input_type, unsigned int *utilization_rate) {
    struct state *st;
    struct chip *c;
    if (!utilization_rate) return E_PARAM;
    int rc = open_chip(&st, &c, card_id, device_id, 1, 0);
    if (rc) return rc;
    if (input_type == 2) *utilization_rate = c->load_aicore;
    else if (input_type == 1) *utilization_rate = (unsigned int)(chip_memory_used(st, c) * 100 / c->memory);
    else rc = E_NOT_SUPPORTED;
    release(st);
    return rc;
}

/* ---- memory ------------------------------------------------------------------------ */
/* `want_hbm`: the call exists for HBM chips (910) or for DDR chips (310P) only. */
static int memory_chip(struct state **st, struct chip **c, int card_id, int device_id, int want_hbm) {
    int rc = open_chip(st, c, card_id, device_id, 0, 0);
    if (rc) return rc;
    rc = (*c)->hbm != want_hbm ? E_NOT_SUPPORTED : (*c)->gone ? E_NOT_READY : DCMI_OK;
    if (rc) { release(*st); *st = NULL; }
    return rc;
}

int dcmi_get_device_hbm_info(int card_id, int device_id, struct dcmi_hbm_info *hbm_info) {
    struct state *st;
    struct chip *c;
    if (!hbm_info) return E_PARAM;
    int rc = memory_chip(&st, &c, card_id, device_id, 1);
    if (rc) return rc;
    memset(hbm_info, 0, sizeof *hbm_info);
    hbm_info->memory_size = c->memory;
    hbm_info->memory_usage = chip_memory_used(st, c);
    hbm_info->freq = 1600;
    hbm_info->temp = c->temp;
    release(st);
    return DCMI_OK;
}

#ifndef OLD_DRIVER
int dcmi_get_device_memory_info_v3(int card_id, int device_id, struct dcmi_get_memory_info_stru *memory_info) {
    struct state *st;
    struct chip *c;
    if (!memory_info) return E_PARAM;
    int rc = memory_chip(&st, &c, card_id, device_id, 0);
    if (rc) return rc;
    unsigned long long used = chip_memory_used(st, c);
    memset(memory_info, 0, sizeof *memory_info);
    memory_info->memory_size = c->memory;
    memory_info->memory_available = c->memory - used;
    memory_info->freq = 3200;
    memory_info->hugepagesize = 2048;
    memory_info->utiliza = (unsigned int)(used * 100 / c->memory);
    release(st);
    return DCMI_OK;
}
#endif

int dcmi_get_memory_info(int card_id, int device_id, struct dcmi_memory_info_stru *device_memory_info) {
    struct state *st;
    struct chip *c;
    if (!device_memory_info) return E_PARAM;
    int rc = memory_chip(&st, &c, card_id, device_id, 0);
    if (rc) return rc;
    device_memory_info->memory_size = c->memory;
    device_memory_info->freq = 3200;
    device_memory_info->utiliza = (unsigned int)(chip_memory_used(st, c) * 100 / c->memory);
    release(st);
    return DCMI_OK;
}

/* ---- vNPUs ------------------------------------------------------------------------- */
static void fill_query(struct state *st, struct chip *c, struct vnpu *v, struct dcmi_vdev_query_info *info) {
    struct tmpl *t = tmpl_by_name(st, v->tmpl);
    memset(info, 0, sizeof *info);
    copy_text(info->name, sizeof info->name, v->tmpl);
    info->is_container_used = (unsigned int)v->used;
    info->vfid = v->id - c->idbase + 1;
    if (!t) return;
    info->computing.aic = (float)t->aicore;
    info->computing.memory_size = t->memory;
    info->computing.device_aicpu = (unsigned short)t->aicpu;
    if (t->has_media) fill_media(&info->media, t->media);
    unsigned long long total = t->memory * 1024, used = v->memory * 1024;
    info->computing.vdev_aicore_utilization = v->aicore;
    info->computing.vdev_memory_total = total;
    info->computing.vdev_memory_free = used < total ? total - used : 0;
}

int dcmi_get_device_info(int card_id, int device_id, int main_cmd, unsigned int sub_cmd, void *buf,
                         unsigned int *size) {
    struct state *st;
    struct chip *c;
    if (main_cmd != 52) return E_NOT_SUPPORTED;
    if (!buf || !size) return E_PARAM;
    int rc = open_chip(&st, &c, card_id, device_id, 1, 0);
    if (rc) return rc;
    struct usage u = chip_usage(st, c);
    if (sub_cmd == 0 || sub_cmd == 5) {
        struct dcmi_vdev_query_stru *q = buf;
        struct vnpu *v = *size < sizeof *q ? NULL : vnpu_on(st, c->phy, q->vdev_id);
        if (sub_cmd == 5 && c->hbm) rc = E_NOT_SUPPORTED; /* vNPU activity: 310P only */
        else if (!v) rc = E_PARAM;
        else { fill_query(st, c, v, &q->query_info); *size = sizeof *q; }
    } else if (sub_cmd == 1 && *size >= sizeof(struct dcmi_soc_total_resource)) {
        struct dcmi_soc_total_resource *total = buf;
        memset(total, 0, sizeof *total);
        for (int i = 0; i < st->nvnpu && total->vdev_num < 32; i++)
            if (st->vnpus[i].phy == c->phy) total->vdev_id[total->vdev_num++] = st->vnpus[i].id;
        total->computing.aic = (float)c->aicore;
        total->computing.memory_size = c->memory;
        total->computing.device_aicpu = (unsigned short)c->aicpu;
        if (c->has_media) fill_media(&total->media, c->media);
        *size = sizeof *total;
    } else if (sub_cmd == 2 && *size >= sizeof(struct dcmi_soc_free_resource)) {
        struct dcmi_soc_free_resource *free_res = buf;
        memset(free_res, 0, sizeof *free_res);
        free_res->computing.aic = (float)c->aicore - (float)u.aicore;
        free_res->computing.memory_size = c->memory - u.memory;
        free_res->computing.device_aicpu = (unsigned short)(c->aicpu - u.aicpu);
        if (c->has_media) {
            unsigned int left[ENGINES];
            for (int e = 0; e < ENGINES; e++) left[e] = c->media[e] - u.media[e];
            fill_media(&free_res->media, left);
        }
        *size = sizeof *free_res;
    } else {
        rc = (sub_cmd <= 2) ? E_PARAM : E_NOT_SUPPORTED;
    }
    release(st);
    return rc;
}

/* Budgets in vnpu_core.budgets order: vNPU count, memory, AI cores, AI CPUs, media. */
static int fits(struct chip *c, struct usage *u, struct tmpl *t) {
    if (u->count >= c->max_vnpus) return 0;
    if (u->memory + t->memory > c->memory) return 0;
    if (u->aicore + t->aicore > c->aicore) return 0;
    if (u->aicpu + t->aicpu > c->aicpu) return 0;
    if (c->has_media && t->has_media)
        for (int e = 0; e < ENGINES; e++)
            if (u->media[e] + t->media[e] > c->media[e]) return 0;
    return 1;
}

int dcmi_create_vdevice(int card_id, int device_id, struct dcmi_create_vdev_res_stru *vdev,
                        struct dcmi_create_vdev_out *out) {
    struct state *st;
    struct chip *c;
    if (!vdev || !out) return E_PARAM;
    int rc = open_chip(&st, &c, card_id, device_id, 1, 1);
    if (rc) return rc;
    char name[33];
    memcpy(name, vdev->template_name, 32);
    name[32] = '\0';
    struct tmpl *t = tmpl_by_name(st, name);
    struct usage u = chip_usage(st, c);
    unsigned int id = vdev->vdev_id;
    if (!t) rc = E_PARAM;
    else if (id != AUTO_ID && (id < c->idbase || id >= c->idbase + c->idcount)) rc = E_PARAM;
    else if (id != AUTO_ID && vnpu_on(st, c->phy, id)) rc = E_OCCUPIED;
    else if (!fits(c, &u, t)) rc = E_OCCUPIED;
    else if (st->nvnpu == MAX_VNPUS) rc = E_INNER;
    if (rc == DCMI_OK && id == AUTO_ID) {
        for (unsigned int candidate = c->idbase; candidate < c->idbase + c->idcount && id == AUTO_ID; candidate++)
            if (!vnpu_on(st, c->phy, candidate)) id = candidate;
        if (id == AUTO_ID) rc = E_OCCUPIED;
    }
    if (rc == DCMI_OK) {
        struct vnpu *v = &st->vnpus[st->nvnpu++];
        memset(v, 0, sizeof *v);
        v->id = id;
        v->phy = c->phy;
        copy_text(v->tmpl, sizeof v->tmpl, name);
        rc = save(st);
    }
    if (rc == DCMI_OK) {
        memset(out, 0, sizeof *out);
        out->vdev_id = id;
        out->pcie_bus = c->bus;
        out->pcie_device = c->dev;
        out->pcie_func = c->func;
    }
    release(st);
    return rc;
}

int dcmi_set_destroy_vdevice(int card_id, int device_id, unsigned int vdevid) {
    struct state *st;
    struct chip *c;
    int rc = open_chip(&st, &c, card_id, device_id, 1, 1);
    if (rc) return rc;
    int kept = 0, found = 0, busy = 0;
    for (int i = 0; i < st->nvnpu; i++) {
        struct vnpu *v = &st->vnpus[i];
        if (v->phy == c->phy && (vdevid == DESTROY_ALL || v->id == vdevid)) {
            found = 1;
            busy |= v->used;
        }
    }
    if (!found && vdevid != DESTROY_ALL) rc = E_PARAM;
    else if (busy) rc = E_OCCUPIED;
    else {
        for (int i = 0; i < st->nvnpu; i++) {
            struct vnpu *v = &st->vnpus[i];
            if (!(v->phy == c->phy && (vdevid == DESTROY_ALL || v->id == vdevid))) st->vnpus[kept++] = *v;
        }
        st->nvnpu = kept;
        rc = save(st);
    }
    release(st);
    return rc;
}

/* ---- for the tests: the C compiler's structure sizes, to check the ctypes layouts --- */
unsigned long vnpu_stand_in_sizeof(const char *name) {
    static const struct { const char *name; unsigned long size; } sizes[] = {
        {"ChipInfo", sizeof(struct dcmi_chip_info)},
        {"PcieInfoAll", sizeof(struct dcmi_pcie_info_all)},
        {"DieId", sizeof(struct dcmi_die_id)},
        {"HbmInfo", sizeof(struct dcmi_hbm_info)},
        {"MemoryInfoV3", sizeof(struct dcmi_get_memory_info_stru)},
        {"MemoryInfoV1", sizeof(struct dcmi_memory_info_stru)},
        {"BaseResource", sizeof(struct dcmi_base_resource)},
        {"ComputingResource", sizeof(struct dcmi_computing_resource)},
        {"MediaResource", sizeof(struct dcmi_media_resource)},
        {"CreateVdevRes", sizeof(struct dcmi_create_vdev_res_stru)},
        {"CreateVdevOut", sizeof(struct dcmi_create_vdev_out)},
        {"VdevQueryInfo", sizeof(struct dcmi_vdev_query_info)},
        {"VdevQuery", sizeof(struct dcmi_vdev_query_stru)},
        {"SocFreeResource", sizeof(struct dcmi_soc_free_resource)},
        {"SocTotalResource", sizeof(struct dcmi_soc_total_resource)},
    };
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++)
        if (!strcmp(sizes[i].name, name)) return sizes[i].size;
    return 0;
}
