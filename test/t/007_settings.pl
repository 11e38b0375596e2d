# Settings: loading without shared_preload_libraries, authentication with
# a password file (the secret never logged, the setting hidden from other
# users; a file others may read, a directory, a FIFO (also one swapped in
# between the worker's look at the path and its open), an empty file, a
# password with a NUL byte and one longer than 1023 bytes refused with the
# reason, one of 1023 bytes used whole), ACL users, the database number,
# the key prefix, a Unix socket, a host name, and a reload that moves the
# worker to another server.

use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use IPC::Run ();
use POSIX ();
use Test::More;
use RlockTest;

my $secret = 'Sup3r-s3cret-pw';

# without shared_preload_libraries: CREATE EXTENSION works, functions refuse
my $plain = PostgreSQL::Test::Cluster->new('plain');
$plain->init;
$plain->start;
$plain->safe_psql('postgres', 'CREATE EXTENSION rlock');
my ($rc, $out, $err) = $plain->psql('postgres',
	"\\set VERBOSITY verbose\nSELECT rlock_try('k')");
like($err,
	qr/ERROR:  55000: rlock must be loaded via shared_preload_libraries/,
	'without preloading, functions raise 55000');
like($err, qr/HINT:  Add rlock to shared_preload_libraries/, 'with a hint');
$plain->stop;

# a password file, an ACL user, a database number
my $redis = RlockTest::Redis->start(
	args => [
		'--user', 'alice', 'on', ">$secret", '~*', '&*', '+@all',
		'--requirepass', 'other-default-pw'
	]);
my $dir = PostgreSQL::Test::Utils::tempdir;
my $pw = RlockTest::password_file($dir, $secret);

my $node = RlockTest::node('auth', $redis,
	conf => [
		"rlock.username = 'alice'",
		"rlock.password_file = '$pw'",
		"rlock.database = 3",
		"rlock.key_prefix = 'app:'"
	]);
ok(RlockTest::wait_for_redis($node, 5), 'AUTH with user and password file works');
my $s = $node->background_psql('postgres');
$s->query_safe("SELECT rlock_session_try('pfx')");
$redis->cmd('AUTH', 'alice', $secret);
$redis->cmd('SELECT', '3');
is($redis->cmd('EXISTS', 'app:pfx'), 1,
	'the lock lives in database 3, under the key prefix');
my $sub = $redis->connect;
$sub->call('AUTH', 'alice', $secret);
$sub->call('SUBSCRIBE', 'redisson_lock__channel:{app:pfx}');
$s->query_safe("SELECT rlock_session_release('pfx')");
is_deeply($sub->next_message(5), [ 'redisson_lock__channel:{app:pfx}', '0' ],
	'the channel carries the prefix too');
$s->quit;

$node->safe_psql('postgres', 'CREATE ROLE joe LOGIN');
$node->safe_psql('postgres',
	'GRANT EXECUTE ON FUNCTION rlock_try(text, interval, interval) TO joe');

# a key namespace per role or database, set by a superuser: the prefix
# is the session's for its life, and views show each holder's key as
# that holder wrote it
$node->safe_psql('postgres',
	"ALTER ROLE joe SET rlock.key_prefix = 'joe:';"
	  . "GRANT EXECUTE ON FUNCTION rlock_session_try(text, interval, interval) TO joe");
my $joe = $node->background_psql('postgres', on_error_stop => 0,
	extra_params => [ '-U', 'joe' ]);
is($joe->query_safe('SHOW rlock.key_prefix'), 'joe:', "joe's sessions get joe's prefix");
my $joe_pid = $joe->query_safe('SELECT pg_backend_pid()');
$joe->query_safe("SELECT rlock_session_try('pfx')");
is($redis->cmd('EXISTS', 'joe:pfx') . $redis->cmd('EXISTS', 'app:pfx'), '10',
	"joe's lock is joe:pfx in Redis, not the instance's app:pfx");
is( $node->safe_psql('postgres',
		"SELECT key FROM rlock_locks WHERE pid = $joe_pid"),
	'pfx', "a superuser's view shows joe's key without joe's prefix");
is($node->safe_psql('postgres', "SELECT rlock_is_locked('pfx')"), 'f',
	'the instance-wide prefix names another key');
$joe->query('SET rlock.key_prefix = \'other:\'');
like($joe->{stderr}, qr/permission denied to set parameter "rlock.key_prefix"/,
	'a session cannot change its prefix');
$joe->{stderr} = '';
$joe->query("ALTER ROLE joe SET rlock.key_prefix = 'other:'");
like($joe->{stderr}, qr/permission denied to set parameter "rlock.key_prefix"/,
	'nor may a role choose its own');
$joe->{stderr} = '';
$joe->quit;
ok(RlockTest::wait_until(sub { $redis->cmd('EXISTS', 'joe:pfx') == 0 }),
	"joe's lock went with its session");
$node->safe_psql('postgres',
	"CREATE DATABASE other; ALTER DATABASE other SET rlock.key_prefix = 'db2:'");
$node->safe_psql('other', 'CREATE EXTENSION rlock');
my $db2 = $node->background_psql('other');
$db2->query_safe("SELECT rlock_session_try('pfx')");
is($redis->cmd('EXISTS', 'db2:pfx'), 1, "a database's own prefix");
$db2->quit;
$node->safe_psql('postgres', 'ALTER ROLE joe RESET rlock.key_prefix');
# nor can a superuser's, once it used rlock: its holds carry the prefix
($rc, $out, $err) = $node->psql('postgres',
	"SET rlock.key_prefix = 'a:'; SELECT rlock_is_locked('x'); SET rlock.key_prefix = 'b:'");
like($err, qr/rlock.key_prefix cannot change once the session has used rlock/,
	"a superuser's session keeps the prefix it used");
# the setting can still move without a SET (a SET LOCAL that ends): lock
# calls then refuse to choose between the two until it is set back
my $sl = $node->background_psql('postgres', on_error_stop => 0);
$sl->query_safe(
	"BEGIN; SET LOCAL rlock.key_prefix = 'l:'; SELECT rlock_session_try('y'); COMMIT"
);
is($redis->cmd('EXISTS', 'l:y'), 1, 'a lock taken under SET LOCAL');
$sl->query("SELECT rlock_is_locked('y')");
like($sl->{stderr},
	qr/ERROR:  rlock.key_prefix changed after the session first used rlock/,
	'once the SET LOCAL ends, lock calls refuse the other prefix');
$sl->{stderr} = '';
is($sl->query_safe(
		"SET rlock.key_prefix = 'l:'; SELECT rlock_session_release('y')"),
	't', 'and work again once it is set back');
is($redis->cmd('EXISTS', 'l:y'), 0, 'on the same key');
$sl->quit;
($rc, $out, $err) = $node->psql('postgres',
	"SELECT rlock_is_locked('x'); ALTER ROLE joe SET rlock.key_prefix = 'later:'; ALTER ROLE joe RESET rlock.key_prefix");
is($err, '', 'but may still set one for a role');

($rc, $out, $err) = $node->psql('postgres', 'SHOW rlock.password_file',
	extra_params => [ '-U', 'joe' ]);
# (PostgreSQL 16 words the refusal differently, the role in a DETAIL)
like($err,
	qr/must be superuser or have privileges of pg_read_all_settings|permission denied to examine "rlock\.password_file"/,
	'other users cannot see the password file setting');

# a wrong password: 58030 naming the cause, and the secret never logged
RlockTest::password_file($dir, "wrong-$secret");
# a changed connection setting makes the worker connect again
$node->append_conf('postgresql.conf', "rlock.database = 4");
$node->reload;
ok( RlockTest::wait_until(
		sub {
			my ($rc, $out, $err) = $node->psql('postgres',
				"\\set VERBOSITY verbose\nSELECT rlock_try('x')");
			$err =~ /58030/ && $err =~ /WRONGPASS|invalid username-password/;
		},
		10),
	'a wrong password fails requests with 58030 and the reason');
my $log = slurp_file($node->logfile);
unlike($log, qr/\Q$secret\E/, 'the password never appears in the log');
like($log, qr/connection settings changed/, 'the reload reconnected');

# a password file that cannot be read: the error names the setting, and
# no user sees the path (only superusers may see the setting)
my $hidden = "$dir/hidden-dir-name/redis.pw";
$node->append_conf('postgresql.conf', "rlock.password_file = '$hidden'");
$node->reload;
ok( RlockTest::wait_until(
		sub {
			($rc, $out, $err) = $node->psql('postgres',
				"\\set VERBOSITY verbose\nSELECT rlock_try('x')",
				extra_params => [ '-U', 'joe' ]);
			$err =~ /could not read the password file \(rlock.password_file\): No such file/;
		},
		10),
	'an unreadable password file: 58030 naming the setting');
unlike($err, qr/hidden-dir-name/, 'not the path');
($rc, $out, $err) = $node->psql('postgres',
	'SELECT last_error FROM rlock_status()', extra_params => [ '-U', 'joe' ]);
like($out, qr/rlock.password_file/, 'rlock_status() names the setting too');
unlike($out, qr/hidden-dir-name/, 'and not the path');

# password files checked as libpq checks a .pgpass file, and a password
# never cut short: each refusal is 58030 with the reason, for any user,
# naming the setting and not the path
sub refused_password_file
{
	my ($path, $reason, $what) = @_;
	$node->append_conf('postgresql.conf', "rlock.password_file = '$path'");
	$node->reload;
	ok( RlockTest::wait_until(
			sub {
				($rc, $out, $err) = $node->psql('postgres',
					"\\set VERBOSITY verbose\nSELECT rlock_try('x')",
					extra_params => [ '-U', 'joe' ]);
				$err =~ /58030/ && $err =~ $reason;
			},
			10),
		"$what: 58030 with the reason")
	  or diag($err);
	unlike($err, qr/\Q$dir\E/, "$what: not the path");
	($rc, $out, $err) = $node->psql('postgres',
		'SELECT last_error FROM rlock_status()', extra_params => [ '-U', 'joe' ]);
	like($out, $reason, "$what: rlock_status() says so");
}
my $loose = RlockTest::password_file($dir, $secret, 'group.pw');
chmod 0640, $loose;
refused_password_file($loose,
	qr/the password file \(rlock\.password_file\) has group or world access; it must be u=rw \(0600\) or less/,
	'a password file its group may read');
chmod 0604, $loose;
refused_password_file($loose, qr/\(rlock\.password_file\) has group or world access/,
	'a password file anyone may read');
mkdir "$dir/a-directory";
refused_password_file("$dir/a-directory",
	qr/the password file \(rlock\.password_file\) is not a regular file/,
	'a directory');
# opening a FIFO would block the worker until a writer came
POSIX::mkfifo("$dir/a-fifo", 0600) or die "mkfifo: $!";
refused_password_file("$dir/a-fifo",
	qr/the password file \(rlock\.password_file\) is not a regular file/,
	'a FIFO, without the worker blocking on it');
is($node->safe_psql('postgres', 'SELECT worker_pid IS NOT NULL FROM rlock_status()'), 't',
	'the worker still answers');
open(my $empty, '>', "$dir/empty.pw") or die;
close $empty;
chmod 0600, "$dir/empty.pw";
refused_password_file("$dir/empty.pw",
	qr/the password file \(rlock\.password_file\) is empty/, 'an empty file');

# the longest password that fits (1023 bytes, with a CRLF line end), and
# one byte more: refused, not cut to the first 1023 (which would be
# accepted: Redis knows that password too)
my $long = join('', map { chr(ord('a') + $_ % 26) } 1 .. 1023);
$redis->cmd('ACL', 'SETUSER', 'alice', ">$long");
refused_password_file(RlockTest::password_file($dir, "${long}x", 'long.pw'),
	qr/the password in the password file \(rlock\.password_file\) is longer than 1023 bytes/,
	'a password of 1024 bytes');
# a NUL byte in the line: refused, not the password cut there (Redis
# would then be sent "ab", another password)
refused_password_file(RlockTest::password_file($dir, "ab\0cd", 'nul.pw'),
	qr/the password in the password file \(rlock\.password_file\) holds a NUL byte/,
	'a password with a NUL byte');
my $fits = RlockTest::password_file($dir, "$long\r", 'fits.pw');
$node->append_conf('postgresql.conf', "rlock.password_file = '$fits'");
$node->reload;
ok(RlockTest::wait_for_redis($node, 10), 'a password of 1023 bytes is used whole');
unlike(slurp_file($node->logfile), qr/\Q$long\E|\Q$secret\E/,
	'no password in the log');

# A password file replaced by a FIFO after the worker looked at what the
# path names and before it opened it: gdb holds the worker at the open
# and swaps the files meanwhile.  The open must not block the worker (a
# FIFO's open waits for a writer): refused as no regular file, at once.
my $swapped = RlockTest::password_file($dir, "$long\r", 'swapped.pw');
$node->append_conf('postgresql.conf', "rlock.password_file = '$swapped'");
$node->reload;
ok(RlockTest::wait_for_redis($node, 10), 'a password file that will be swapped is used');
POSIX::mkfifo("$dir/swap-fifo", 0600) or die "mkfifo: $!";
my $gdb_out = '';
my $gdb = IPC::Run::start(
	[ 'gdb', '-p', RlockTest::worker_pid($node), '-batch', '-nx',
	  '-ex', 'set confirm off',
	  '-ex', "break open64 if \$_streq((char *) \$rdi, \"$swapped\")",
	  '-ex', 'continue',
	  '-ex', "shell mv -f '$dir/swap-fifo' '$swapped'" ],
	'<', \undef, '>&', \$gdb_out, IPC::Run::timeout(60));
ok(RlockTest::wait_until(sub { $gdb->pump_nb; $gdb_out =~ /Breakpoint 1 at/ }, 30),
	'gdb holds the worker at its next open of the password file')
  or diag($gdb_out);
# the worker's connections closed by Redis: it connects again, and reads
# the password file for that
$redis->cmd('CLIENT', 'KILL', 'USER', 'alice', 'SKIPME', 'yes');
$gdb->finish;
like($gdb_out, qr/Breakpoint 1, .*open64/, 'the worker stopped at the open, and the files were swapped');
ok(-p $swapped, 'the password file is a FIFO now');
ok( RlockTest::wait_until(
		sub {
			($rc, $out, $err) = $node->psql('postgres',
				"SET statement_timeout = '3s';\n\\set VERBOSITY verbose\nSELECT rlock_try('x')");
			$err =~ /58030/ && $err =~ /the password file \(rlock\.password_file\) is not a regular file/;
		},
		10),
	'a FIFO swapped in before the open: refused, the worker not blocked in the open')
  or diag($err);
# a worker blocked in the open goes on once a writer comes
if (sysopen(my $writer, $swapped, POSIX::O_WRONLY | POSIX::O_NONBLOCK))
{
	close $writer;
}

$node->append_conf('postgresql.conf', "rlock.password_file = '$pw'");
$node->reload;

# a reload moves the worker to another server: here by name and socket
my $other = RlockTest::Redis->start(
	args => [ '--unixsocket', "$dir/redis.sock", '--unixsocketperm', '700' ]);
$node->append_conf('postgresql.conf', join("\n",
	"rlock.host = 'localhost'",
	"rlock.port = " . $other->rlock_port,
	"rlock.username = ''",
	"rlock.password_file = ''",
	"rlock.database = 0", ''));
$node->reload;
ok(RlockTest::wait_for_redis($node, 10), 'a host name is resolved and used');
$s = $node->background_psql('postgres');
$s->query_safe("SELECT rlock_session_try('by-name')");
is($other->cmd('EXISTS', 'app:by-name'), 1, 'on the new server');
$s->query_safe("SELECT rlock_session_release('by-name')");

$node->append_conf('postgresql.conf',
	"rlock.unix_socket = '$dir/redis.sock'\nrlock.port = 1\n");
$node->reload;
ok(RlockTest::wait_for_redis($node, 10),
	'a Unix socket is used instead of host and port');
$s->query_safe("SELECT rlock_session_try('by-socket')");
is($other->cmd('EXISTS', 'app:by-socket'), 1, 'through the socket');
$s->quit;
ok(RlockTest::wait_until(sub { $other->cmd('EXISTS', 'app:by-socket') == 0 }),
	'released when the session ends');

done_testing();
