# Sessions of one role cannot take every entry of the shared table of
# held locks: the last rlock.superuser_reserved_locks are kept for
# superusers, as superuser_reserved_connections keeps connections.  Four
# sessions of a role granted the locking functions fill what they may and
# are refused with 53200 saying so; a superuser still locks, inspects and
# force-releases, until the table is really full.
use strict;
use warnings;

use PostgreSQL::Test::Utils;
use Test::More;
use RlockTest;
use RlockTest::Redis;

plan skip_all => 'the hold table does not depend on TLS: the plain round runs this'
  if RlockTest::TLS::everywhere();

my $redis = RlockTest::Redis->start;
my $node = RlockTest::node('reserve', $redis,
	conf => [ 'rlock.max_locks = 16', 'rlock.superuser_reserved_locks = 4' ]);
$node->safe_psql('postgres', q{
	CREATE ROLE app LOGIN;
	GRANT EXECUTE ON FUNCTION rlock_session_try(text, interval, interval) TO app;
	GRANT EXECUTE ON FUNCTION rlock_release_all() TO app;
});

my @app = map { $node->background_psql('postgres', on_error_stop => 0,
		extra_params => [ '-U', 'app' ]) } 1 .. 4;
my $taken = 0;
for my $i (0 .. 3)
{
	$taken += $app[$i]->query(
		"SELECT count(*) FROM generate_series(1, 6) k WHERE rlock_session_try('res:$i:' || k)");
}
is($taken, 12, 'four sessions of one role took 12 of the 16 entries');
like($app[3]->{stderr},
	qr/ERROR:  out of rlock lock table entries\nDETAIL:  The entries of the shared table of held locks still free are reserved for superusers \(rlock\.superuser_reserved_locks = 4\)\./,
	'the next is refused: the last four are reserved');
my ($rc, $out, $err) = $node->psql('postgres',
	"\\set VERBOSITY verbose\nSELECT rlock_session_try('res:other')",
	connstr => $node->connstr('postgres') . ' user=app');
like($err, qr/ERROR:  53200: out of rlock lock table entries/,
	'so is a new session of that role, with 53200');

# the role that runs the statement counts, not the owner of a SECURITY
# DEFINER function on the way: a superuser's wrapper called by a role
# without the reserve takes nothing of it, and a superuser calling a
# role's locking function may
$node->safe_psql('postgres', q{
	CREATE ROLE wrapped LOGIN;
	CREATE FUNCTION su_lock(k text) RETURNS boolean SECURITY DEFINER
	  LANGUAGE sql AS $$ SELECT rlock_session_try(k) $$;
	REVOKE ALL ON FUNCTION su_lock(text) FROM PUBLIC;
	GRANT EXECUTE ON FUNCTION su_lock(text) TO wrapped;
	CREATE FUNCTION app_lock(k text) RETURNS boolean SECURITY DEFINER
	  LANGUAGE sql AS $$ SELECT rlock_session_try(k) $$;
	ALTER FUNCTION app_lock(text) OWNER TO app;
});
($rc, $out, $err) = $node->psql('postgres',
	"SELECT su_lock('res:wrapped')",
	connstr => $node->connstr('postgres') . ' user=wrapped');
like($err, qr/DETAIL:  The entries of the shared table of held locks still free are reserved for superusers/,
	"a superuser's SECURITY DEFINER function does not give its callers the reserve");
my $su = $node->background_psql('postgres', on_error_stop => 0);
is($su->query("SELECT app_lock('res:su:0')"), 't',
	"a superuser calling a role's SECURITY DEFINER function takes a reserved entry");
$su->query_safe("SELECT rlock_session_release('res:su:0')");
ok(RlockTest::wait_until(
		sub { $node->safe_psql('postgres', 'SELECT locks_in_use FROM rlock_status()') == 12 }, 10),
	'and gives it back');
is($su->query("SELECT count(*) FROM generate_series(1, 4) k WHERE rlock_session_try('res:su:' || k)"),
	'4', 'a superuser takes the four reserved entries');
is($node->safe_psql('postgres', "SELECT rlock_force_release('res:0:1')"), 't',
	'and can force a lock away');
$su->query("SELECT rlock_session_try('res:su:5')");
like($su->{stderr}, qr/ERROR:  out of rlock lock table entries\nDETAIL:  All 16 entries of the shared table of held locks are in use\./,
	'past them the table is full for superusers too');

# a superuser may move the line at a reload
$_->{stderr} = '' for (@app, $su);
$_->query_safe('SELECT rlock_release_all()') for (@app, $su);
$node->append_conf('postgresql.conf', 'rlock.superuser_reserved_locks = 0');
$node->reload;
ok(RlockTest::wait_until(
		sub {
			$app[0]->query("SELECT count(*) FROM generate_series(1, 16) k WHERE rlock_session_try('res:all:' || k)")
			  eq '16';
		},
		10),
	'with none reserved, a role may take every entry');
# (a try before the backend read the reload fails, and its error stays
# in the session's stderr, which query_safe would take for this one's)
$app[0]->{stderr} = '';
$app[0]->query_safe('SELECT rlock_release_all()');
$_->quit for (@app, $su);

$node->stop;
$redis->stop;
done_testing();
