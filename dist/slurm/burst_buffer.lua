--[[
burst_buffer.lua: stage-in and stage-out with omst, for Slurm's burst_buffer/lua
plugin (checked on Debian's Slurm 22.05; docs/operations.md, "Under Slurm").

A job script asks, with lines among its #SBATCH lines:

  #BB_LUA omst get NAME PATH    before the job starts, the blob NAME into PATH
  #BB_LUA omst put NAME PATH    after the job ends, the file PATH published as NAME

NAME is an omst name (letters, digits, . _ - /; no ..), PATH an absolute path
(the same characters) on a file system the job's nodes see: the commands run on
the slurmctld host, as the job's user (setpriv), through the omst daemon there
(OMST_SOCKET below; start it with --socket-group so that users reach it). Several
lines of each kind are allowed; each get must succeed before the job starts (a
failed one holds the job; `scontrol show job` gives the reason), each put runs
after it ends (a failed one is in the job's reason and slurmctld's log). A
malformed line rejects the job at submission.

Install: copy this file next to slurm.conf, add BurstBufferType=burst_buffer/lua
to slurm.conf and `Directive=BB_LUA` to burst_buffer.conf, restart slurmctld. The
plugin refuses burst buffers to root's jobs (Slurm's rule, not omst's).
Settings: the environment of slurmctld, else the defaults below.
]]

lua_script_name = "burst_buffer.lua"

local OMST = os.getenv("OMST_BB_BIN") or "/usr/local/bin/omst"
local SOCKET = os.getenv("OMST_BB_SOCKET") or "/var/lib/omst/omst.sock"
local SETPRIV = os.getenv("OMST_BB_SETPRIV") or "/usr/bin/setpriv"

local function log(msg)
	if slurm.log_info ~= nil then
		slurm.log_info("%s", msg)
	end
end

-- valid_name / valid_path: only characters that need no quoting in sh.
local function valid_name(s)
	return s ~= nil and s:match("^[%w%._%-/]+$") ~= nil and s:find("%.%.") == nil
		and s:sub(1, 1) ~= "/" and s:sub(-1) ~= "/"
end

local function valid_path(s)
	return s ~= nil and s:match("^/[%w%._%-/]+$") ~= nil and s:find("/%.%.") == nil
end

-- directives(job_script): the job's omst lines as {op=, name=, path=}, or
-- nil and the first bad line.
local function directives(job_script)
	local f, err = io.open(job_script, "r")
	if f == nil then
		return nil, "cannot read the job script: " .. tostring(err)
	end
	local out = {}
	for line in f:lines() do
		local rest = line:match("^#BB_LUA%s+omst%s+(.*)$")
		if rest ~= nil then
			local op, name, path, extra = rest:match("^(%S+)%s+(%S+)%s+(%S+)%s*(.*)$")
			if op ~= "get" and op ~= "put" then
				f:close()
				return nil, "#BB_LUA omst: want `omst get NAME PATH` or `omst put NAME PATH`: " .. line
			end
			if extra ~= "" or not valid_name(name) or not valid_path(path) then
				f:close()
				return nil, "#BB_LUA omst " .. op .. ": want a NAME (letters, digits, . _ - /) and an absolute PATH: " .. line
			end
			table.insert(out, { op = op, name = name, path = path })
		end
	end
	f:close()
	return out
end

-- The job's user, as slurm_bb_setup gave it, kept beside the job's script
-- (its directory is the job's, removed with it).
local function user_file(job_script)
	return (job_script:gsub("/[^/]*$", "")) .. "/omst-bb-user"
end

local function job_user(job_script)
	local f = io.open(user_file(job_script), "r")
	if f == nil then
		return nil
	end
	local line = f:read("*l") or ""
	f:close()
	return line:match("^(%d+) (%d+)$")
end

-- run(uid, gid, args): the omst command as the job's user; its status and
-- its output (standard output and error).
local function run(uid, gid, args)
	local out = os.tmpname()
	local cmd = string.format("OMST_SOCKET='%s' %s --reuid=%s --regid=%s --init-groups '%s' -q %s >'%s' 2>&1 </dev/null",
		SOCKET, SETPRIV, uid, gid, OMST, args, out)
	local status = os.execute(cmd)
	local f = io.open(out, "r")
	local text = ""
	if f ~= nil then
		text = f:read("*a") or ""
		f:close()
	end
	os.remove(out)
	return status == 0, (text:gsub("%s+$", ""))
end

-- stage(job_id, job_script, op): every directive of kind op, in order.
local function stage(job_id, job_script, op)
	local ds, err = directives(job_script)
	if ds == nil then
		return slurm.ERROR, err
	end
	local uid, gid = job_user(job_script)
	if uid == nil then
		if #ds == 0 then
			return slurm.SUCCESS
		end
		return slurm.ERROR, "omst: the job's user is unknown (no slurm_bb_setup record)"
	end
	for _, d in ipairs(ds) do
		if d.op == op then
			local args
			if op == "get" then
				args = string.format("get '%s' -o '%s'", d.name, d.path)
			else
				args = string.format("put '%s' '%s'", d.name, d.path)
			end
			local ok, text = run(uid, gid, args)
			if not ok then
				local msg = string.format("omst %s %s %s for job %s failed: %s", op, d.name, d.path, job_id, text)
				log(msg)
				return slurm.ERROR, msg
			end
			log(string.format("omst %s %s %s for job %s: done", op, d.name, d.path, job_id))
		end
	end
	return slurm.SUCCESS
end

-- At submission: a malformed directive rejects the job.
function slurm_bb_job_process(job_script)
	local ds, err = directives(job_script)
	if ds == nil then
		return slurm.ERROR, err
	end
	return slurm.SUCCESS
end

function slurm_bb_pools()
	return slurm.SUCCESS
end

function slurm_bb_setup(job_id, uid, gid, pool, bb_size, job_script)
	local f, err = io.open(user_file(job_script), "w")
	if f == nil then
		return slurm.ERROR, "omst: cannot keep the job's user: " .. tostring(err)
	end
	f:write(string.format("%d %d\n", uid, gid))
	f:close()
	return slurm.SUCCESS
end

function slurm_bb_data_in(job_id, job_script)
	return stage(job_id, job_script, "get")
end

function slurm_bb_test_data_in(job_id, job_script)
	return slurm.SUCCESS, "yes"
end

function slurm_bb_real_size(job_id)
	return slurm.SUCCESS
end

function slurm_bb_paths(job_id, job_script, path_file)
	return slurm.SUCCESS
end

function slurm_bb_pre_run(job_id, job_script)
	return slurm.SUCCESS
end

function slurm_bb_post_run(job_id, job_script)
	return slurm.SUCCESS
end

function slurm_bb_data_out(job_id, job_script)
	return stage(job_id, job_script, "put")
end

function slurm_bb_test_data_out(job_id, job_script)
	return slurm.SUCCESS, "yes"
end

function slurm_bb_job_teardown(job_id, job_script, hurry)
	os.remove(user_file(job_script))
	return slurm.SUCCESS
end

function slurm_bb_get_status(...)
	return slurm.SUCCESS, "omst stage-in/out: #BB_LUA omst get NAME PATH, #BB_LUA omst put NAME PATH\n"
end
