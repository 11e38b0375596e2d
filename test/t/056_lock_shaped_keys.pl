# The functions that read or remove a key any caller names act only on
# keys shaped like locks (a hash of owners "<id>:<n>" with hold counts,
# and maybe "mode"): rlock_is_locked() and rlock_ttl(), which everybody
# may call, tell nothing about other keys of the database (no existence
# or TTL oracle); rlock_holder() does not read another hash's fields;
# rlock_force_release() removes no other data.
use strict;
use warnings;

use PostgreSQL::Test::Utils;
use Test::More;
use RlockTest;
use RlockTest::Redis;

plan skip_all => 'the shape of keys does not depend on TLS: the plain round runs this'
  if RlockTest::TLS::everywhere();

my $redis = RlockTest::Redis->start;
my $node = RlockTest::node('shape', $redis);
$node->safe_psql('postgres', 'CREATE ROLE nobody LOGIN');

sub as_nobody
{
	my ($sql) = @_;
	my ($rc, $out, $err) = $node->psql('postgres', "\\set VERBOSITY verbose\n$sql",
		connstr => $node->connstr('postgres') . ' user=nobody');
	return $rc == 0 ? $out : $err;
}

# data of other applications, with expiries
$redis->cmd('SET', 'app:string', 'secret', 'PX', 500000);
$redis->cmd('HSET', 'app:user', 'name', 'alice', 'email', 'a@example.org');
$redis->cmd('PEXPIRE', 'app:user', 400000);
$redis->cmd('HSET', 'app:almost', 'java-client:7', 'x');	# a count that is no number
$redis->cmd('PEXPIRE', 'app:almost', 300000);
$redis->cmd('RPUSH', 'app:list', 'a');
$redis->cmd('HSET', 'app:big', map { ("c$_:$_", 1) } 1 .. 1100);	# shaped, but too big
# locks: a Redisson client's, a read lock's, rlock's own
$redis->cmd('HSET', 'lock:java', '3f1c8a5e-1b2c-4d5e-8f90-123456789abc:42', 1);
$redis->cmd('PEXPIRE', 'lock:java', 30000);
$redis->cmd('HSET', 'lock:read', 'mode', 'read', '3f1c8a5e-1b2c-4d5e-8f90-123456789abc:7', 2);
$redis->cmd('PEXPIRE', 'lock:read', 30000);
my $holder = $node->background_psql('postgres');
$holder->query_safe("SELECT rlock_session_try('lock:sql')");

for my $key (qw(app:string app:user app:almost app:list app:big app:none))
{
	is(as_nobody("SELECT rlock_is_locked('$key')"), 'f',
		"$key: rlock_is_locked says false to anyone");
	is(as_nobody("SELECT rlock_ttl('$key') IS NULL"), 't',
		"$key: rlock_ttl says NULL");
	is($node->safe_psql('postgres', "SELECT owner IS NULL FROM rlock_holder('$key')"), 't',
		"$key: rlock_holder sees no holder");
}
for my $key (qw(lock:java lock:read lock:sql))
{
	is(as_nobody("SELECT rlock_is_locked('$key')"), 't', "$key: locked");
	is(as_nobody("SELECT rlock_ttl('$key') > '0'"), 't', "$key: with its lease");
	is($node->safe_psql('postgres', "SELECT owner IS NOT NULL FROM rlock_holder('$key')"), 't',
		"$key: rlock_holder names its holder");
}
is($node->safe_psql('postgres', "SELECT count FROM rlock_holder('lock:java')"), '1',
	"a Redisson client's hold count");

# rlock_force_release leaves other data alone, with 58000
for my $key (qw(app:user app:almost app:big))
{
	my ($rc, $out, $err) = $node->psql('postgres',
		"\\set VERBOSITY verbose\nSELECT rlock_force_release('$key')");
	like($err, qr/ERROR:  58000: Redis returned an error for lock "\Q$key\E"\n.*DETAIL:  WRONGTYPE the key holds a hash of other data, not a lock/s,
		"$key: rlock_force_release refuses it");
	is($redis->cmd('EXISTS', $key), 1, "$key: and the data is still there");
}
is($node->safe_psql('postgres', "SELECT rlock_force_release('lock:java')"), 't',
	"a Redisson client's lock is removed");
is($redis->cmd('EXISTS', 'lock:java'), 0, 'gone');
$holder->quit;

$node->stop;
$redis->stop;
done_testing();
